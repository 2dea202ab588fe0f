// The parts of a KV lease (worker.proto: KvLease.parts, one StatePart per state a sequence owns)
// and of its commit, as both workers read them: one place that knows how to find a part, what a
// well-formed manifest is, and what a commit says about each part.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "dqserve/v1/worker.pb.h"

namespace dq::worker {

// "target", "drafter" (logs and error messages).
std::string StatePartName(dqserve::v1::StatePartRole role);
// "paged KV", "state slot".
std::string StatePartKindName(dqserve::v1::StatePartKind kind);

// The lease's part with `role` and `kind`, or null when it has none.
const dqserve::v1::StatePart* FindPart(
    const dqserve::v1::KvLease& lease, dqserve::v1::StatePartRole role,
    dqserve::v1::StatePartKind kind = dqserve::v1::STATE_PART_KIND_PAGED_KV);
dqserve::v1::StatePart* FindMutablePart(
    dqserve::v1::KvLease* lease, dqserve::v1::StatePartRole role,
    dqserve::v1::StatePartKind kind = dqserve::v1::STATE_PART_KIND_PAGED_KV);

// A well-formed manifest: exactly one target paged KV part, which is required; at most one part
// per (role, kind); paged KV parts with block runs; a state slot part only for the target,
// required, with a slot layout (layers, layer bytes, dtype), one KV_TENSOR_STATE_SLOT region
// that holds the whole slot, and no blocks or cached tokens. InvalidArgument naming the part
// and what is wrong.
absl::Status CheckLeaseParts(const dqserve::v1::KvLease& lease);

// "" when `got` (a lease's slot layout) equals `mine`; otherwise which fields differ, with both
// values.
std::string StateSlotLayoutMismatch(const dqserve::v1::StateSlotLayout& got,
                                    const dqserve::v1::StateSlotLayout& mine);
// The bytes a slot of `layout` holds: layers * layer_bytes.
uint64_t StateSlotBytes(const dqserve::v1::StateSlotLayout& layout);

// Records in `commit` what the prefill worker did with the part (`skipped` empty: written).
void CommitPart(dqserve::v1::KvCommit* commit, dqserve::v1::StatePartRole role,
                const std::string& skipped,
                dqserve::v1::StatePartKind kind = dqserve::v1::STATE_PART_KIND_PAGED_KV);
// Whether `commit` says the part with `role` and `kind` was written for the whole prompt.
bool PartWritten(const dqserve::v1::KvCommit& commit, dqserve::v1::StatePartRole role,
                 dqserve::v1::StatePartKind kind = dqserve::v1::STATE_PART_KIND_PAGED_KV);
// Why the part was not written ("" when it was, or the commit does not say).
std::string PartSkipped(const dqserve::v1::KvCommit& commit, dqserve::v1::StatePartRole role,
                        dqserve::v1::StatePartKind kind = dqserve::v1::STATE_PART_KIND_PAGED_KV);

}  // namespace dq::worker
