// The self drafter's weights as both workers load them, and what identifies them on the wire.
// The decode worker drafts with them; a prefill worker that loads the same ones computes the
// drafter's prompt KV and ships it beside the target's (docs/speculative.md). Both quantize the
// same base (--model, never a phase's own --weights), so equal flags give equal weights, and
// the fingerprint proves it before any drafter KV crosses.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "dqserve/v1/worker.pb.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_runner.h"
#include "engine/spec/dflash_config.h"
#include "worker_common/kv_staging.h"
#include "worker_common/phase_model.h"

namespace dq::worker {

struct DrafterWeightsOptions {
  std::string format;   // --draft-format: quantize the model's base checkpoint to this
  int group_size = 0;   // --draft-group-size (intN; 0: the codec's default)
  std::string weights;  // --draft-weights: a checkpoint of its own (shares the tokenizer)
  bool enabled() const { return !format.empty() || !weights.empty(); }
};

// The drafter's weights: pm.model's checkpoint quantized to options.format, or
// options.weights. Errors (LoadDraftModel's): both or neither given, an unknown format, a base
// that is already quantized, another tokenizer.
absl::StatusOr<std::unique_ptr<Model>> LoadDrafterWeights(const PhaseModel& pm,
                                                          const DrafterWeightsOptions& options,
                                                          int threads);

// "<scheme>:<hash>": the drafter's storage scheme and a 64-bit FNV-1a hash over its config's
// shape, each tensor's name, dtype and shape, and up to 4 KiB from the start, middle and end of
// its bytes. Equal weights give equal fingerprints; other formats, group sizes or base models
// (practically) never do. Cheap: a few KiB per tensor.
std::string DrafterFingerprint(const Model& draft);

// "dflash:<hash>": the same hash over a DFlash drafter's checkpoint (`draft`) and the config
// fields that shape its context K/V (layers, heads, head dim, block size, mask token, target
// layer ids), so two workers agree on it only when their context K/V is the same function of
// the target's hidden states.
std::string DFlashFingerprint(const DFlashConfig& config, const Checkpoint& draft);

// The KV layout of a drafter's cache: its model's shape, the cache's dtype and block size.
dqserve::v1::KvLayout DrafterKvLayout(ModelRunner& runner, const KvStaging& staging);
// The same for a cache that is a bare pool (DFlash's context K/V), named `architecture`.
dqserve::v1::KvLayout DrafterKvLayout(const std::string& architecture, const KvBlockPool& pool,
                                      const KvStaging& staging);

}  // namespace dq::worker
