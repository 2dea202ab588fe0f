// What one sequence owns on a worker (worker.proto SequenceManifest): a list of typed parts,
// each a StatePart without blocks or endpoint that says whose state it is (target, drafter), how
// it is laid out (paged KV: per layer and tensor, blocks of block_size tokens; state slot: one
// fixed slot per sequence, layer after layer) and which weights must compute it. Declared once
// from the model program (ModelRunner::sequence_state) and the drafter's pool; a decode worker's
// leases hold exactly its manifest's parts (with blocks and endpoints), and prefill and decode
// workers compare manifests at handshake instead of finding a difference on the first request.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "dqserve/v1/worker.pb.h"
#include "engine/kvcache/kv_block_pool.h"
#include "worker_common/phase_model.h"

namespace dq::worker {

// Bytes per element of a KvLayout.kv_dtype: f32 4, bf16 and f16 2, fp8_e4m3 1; 0 for others.
int KvDtypeBytes(std::string_view dtype);

// The layout of a paged KV pool shaped as `pool` (heads, head dim, block size) holding the K/V
// of `layers` (model layers, in the pool's layer order; empty: 0..pool.num_layers-1), of a
// model of `architecture` with `num_layers` layers, in `dtype`.
dqserve::v1::KvLayout PagedKvLayout(const std::string& architecture, int num_layers,
                                    const KvCacheOptions& pool, std::string_view dtype,
                                    std::span<const int> layers = {});

// Manifest parts: paged KV (the target's is required; a drafter's is not: a writer without that
// drafter skips it) and a target state slot (always required).
dqserve::v1::StatePart PagedKvPart(dqserve::v1::StatePartRole role, dqserve::v1::KvLayout layout,
                                   std::string fingerprint = "");
dqserve::v1::StatePart StateSlotPart(dqserve::v1::StateSlotLayout layout);

// Bytes of one layer's unit of `part`: one block of one tensor (paged KV) or one layer's state
// (state slot); 0 for a part whose dtype or kind is unknown.
uint64_t PartLayerBytes(const dqserve::v1::StatePart& part);
// Bytes that one sequence of `tokens` tokens owns in `part`: K and V of every layer for
// ceil(tokens / block_size) blocks, or the whole slot whatever the length.
uint64_t PartSequenceBytes(const dqserve::v1::StatePart& part, int tokens);

// The manifest of `pm`'s sequences: the target's paged KV (KvLayoutOf: the program's attention
// layers) and, when its program keeps recurrent state, the target's state slot (pm.state_slot,
// StateSlotLayoutFor the program's sequence state). Sealed.
dqserve::v1::SequenceManifest ManifestOf(const PhaseModel& pm);
// Appends `part` (a drafter's KV) and seals again.
void AddManifestPart(dqserve::v1::SequenceManifest* manifest, dqserve::v1::StatePart part);
// Sets manifest.hash: hex FNV-1a 64 over the parts' serialized layouts.
void SealManifest(dqserve::v1::SequenceManifest* manifest);

// "" when `got`'s layout (kv_layout or slot_layout, fingerprint) equals `mine`'s; otherwise one
// clause per differing field with both values. Blocks, endpoints and cached tokens are ignored.
std::string PartLayoutMismatch(const dqserve::v1::StatePart& got,
                               const dqserve::v1::StatePart& mine);
// "" when every required part of either manifest is in the other with an equal layout; else a
// readable diff, one clause per part ("target state slot: only the decode worker has it").
// `peer` names `expected`'s side in the text ("the decode worker").
std::string ManifestMismatch(const dqserve::v1::SequenceManifest& expected,
                             const dqserve::v1::SequenceManifest& mine, std::string_view peer);
// The same over optional parts (drafters): a difference only means the decode worker computes
// that drafter's prompt KV itself, so it is logged, never refused.
std::string OptionalPartDifferences(const dqserve::v1::SequenceManifest& expected,
                                    const dqserve::v1::SequenceManifest& mine,
                                    std::string_view peer);
// OK when ManifestMismatch is empty; else FailedPrecondition with FAILURE_REASON_MANIFEST_MISMATCH
// (worker_status.h) naming both hashes, the diff and what to do.
absl::Status CheckManifest(const dqserve::v1::SequenceManifest& expected,
                           const dqserve::v1::SequenceManifest& mine, std::string_view peer);

}  // namespace dq::worker
