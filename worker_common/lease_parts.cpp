#include "worker_common/lease_parts.h"

#include "absl/strings/str_cat.h"

namespace dq::worker {
namespace v1 = dqserve::v1;

std::string StatePartName(v1::StatePartRole role) {
  switch (role) {
    case v1::STATE_PART_ROLE_TARGET:
      return "target";
    case v1::STATE_PART_ROLE_DRAFTER:
      return "drafter";
    default:
      return "unspecified";
  }
}

const v1::StatePart* FindPart(const v1::KvLease& lease, v1::StatePartRole role) {
  for (const v1::StatePart& part : lease.parts()) {
    if (part.role() == role) return &part;
  }
  return nullptr;
}

v1::StatePart* FindMutablePart(v1::KvLease* lease, v1::StatePartRole role) {
  for (v1::StatePart& part : *lease->mutable_parts()) {
    if (part.role() == role) return &part;
  }
  return nullptr;
}

absl::Status CheckLeaseParts(const v1::KvLease& lease) {
  int target = 0;
  int drafter = 0;
  for (int i = 0; i < lease.parts_size(); ++i) {
    const v1::StatePart& part = lease.parts(i);
    const std::string where = absl::StrCat("lease ", lease.lease_id(), " part ", i, " (",
                                           StatePartName(part.role()), ")");
    switch (part.role()) {
      case v1::STATE_PART_ROLE_TARGET:
        ++target;
        if (!part.required()) {
          return absl::InvalidArgumentError(absl::StrCat(where, " must be required"));
        }
        break;
      case v1::STATE_PART_ROLE_DRAFTER:
        ++drafter;
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(where, " has no role"));
    }
    if (part.kind() != v1::STATE_PART_KIND_PAGED_KV) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " has kind ", v1::StatePartKind_Name(part.kind()),
                       "; this worker writes STATE_PART_KIND_PAGED_KV parts only"));
    }
    if (part.blocks_size() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has no blocks"));
    }
  }
  if (target != 1 || drafter > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lease ", lease.lease_id(), " has ", target, " target and ", drafter,
        " drafter parts; a lease holds exactly one target part and at most one per role"));
  }
  return absl::OkStatus();
}

void CommitPart(v1::KvCommit* commit, v1::StatePartRole role, const std::string& skipped) {
  v1::StatePartCommit* c = commit->add_parts();
  c->set_role(role);
  c->set_written(skipped.empty());
  c->set_skipped(skipped);
}

namespace {

const v1::StatePartCommit* FindCommit(const v1::KvCommit& commit, v1::StatePartRole role) {
  for (const v1::StatePartCommit& c : commit.parts()) {
    if (c.role() == role) return &c;
  }
  return nullptr;
}

}  // namespace

bool PartWritten(const v1::KvCommit& commit, v1::StatePartRole role) {
  const v1::StatePartCommit* c = FindCommit(commit, role);
  return c != nullptr && c->written();
}

std::string PartSkipped(const v1::KvCommit& commit, v1::StatePartRole role) {
  const v1::StatePartCommit* c = FindCommit(commit, role);
  return c == nullptr ? std::string() : c->skipped();
}

}  // namespace dq::worker
