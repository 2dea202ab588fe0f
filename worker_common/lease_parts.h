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

// The lease's part with `role`, or null when it has none.
const dqserve::v1::StatePart* FindPart(const dqserve::v1::KvLease& lease,
                                       dqserve::v1::StatePartRole role);
dqserve::v1::StatePart* FindMutablePart(dqserve::v1::KvLease* lease,
                                        dqserve::v1::StatePartRole role);

// A well-formed manifest: exactly one target part, which is required; at most one part per
// role; every part with a role, a kind and block runs. InvalidArgument naming the part and what
// is wrong.
absl::Status CheckLeaseParts(const dqserve::v1::KvLease& lease);

// Records in `commit` what the prefill worker did with `role`'s part (`skipped` empty: written).
void CommitPart(dqserve::v1::KvCommit* commit, dqserve::v1::StatePartRole role,
                const std::string& skipped);
// Whether `commit` says the part with `role` was written for the whole prompt.
bool PartWritten(const dqserve::v1::KvCommit& commit, dqserve::v1::StatePartRole role);
// Why the part with `role` was not written ("" when it was, or the commit does not say).
std::string PartSkipped(const dqserve::v1::KvCommit& commit, dqserve::v1::StatePartRole role);

}  // namespace dq::worker
