#include "worker_common/lease_parts.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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

std::string StatePartKindName(v1::StatePartKind kind) {
  switch (kind) {
    case v1::STATE_PART_KIND_PAGED_KV:
      return "paged KV";
    case v1::STATE_PART_KIND_STATE_SLOT:
      return "state slot";
    default:
      return "unspecified kind";
  }
}

const v1::StatePart* FindPart(const v1::KvLease& lease, v1::StatePartRole role,
                              v1::StatePartKind kind) {
  for (const v1::StatePart& part : lease.parts()) {
    if (part.role() == role && part.kind() == kind) return &part;
  }
  return nullptr;
}

v1::StatePart* FindMutablePart(v1::KvLease* lease, v1::StatePartRole role, v1::StatePartKind kind) {
  for (v1::StatePart& part : *lease->mutable_parts()) {
    if (part.role() == role && part.kind() == kind) return &part;
  }
  return nullptr;
}

uint64_t StateSlotBytes(const v1::StateSlotLayout& layout) {
  return static_cast<uint64_t>(layout.layers_size()) * layout.layer_bytes();
}

namespace {

absl::Status CheckPagedKv(const std::string& where, const v1::StatePart& part) {
  if (part.blocks_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has no blocks"));
  }
  return absl::OkStatus();
}

absl::Status CheckStateSlot(const std::string& where, const v1::StatePart& part) {
  const v1::StateSlotLayout& l = part.slot_layout();
  if (part.role() != v1::STATE_PART_ROLE_TARGET) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": only the target's state has a state slot (drafters keep KV only)"));
  }
  if (!part.required()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " must be required"));
  }
  if (l.layers_size() == 0 || l.layer_bytes() == 0 || l.dtype().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " has no slot layout (it needs layers, layer_bytes and a dtype)"));
  }
  if (part.blocks_size() != 0 || part.cached_tokens() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " has blocks or cached tokens; a state slot has neither"));
  }
  if (part.endpoint().regions_size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has ", part.endpoint().regions_size(),
                                                   " regions; a state slot has exactly one"));
  }
  const v1::KvRemoteRegion& r = part.endpoint().regions(0);
  if (r.tensor() != v1::KV_TENSOR_STATE_SLOT || r.layer_stride_bytes() != l.layer_bytes() ||
      static_cast<uint64_t>(r.num_layers()) != static_cast<uint64_t>(l.layers_size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "'s region is not a whole slot (it needs tensor KV_TENSOR_STATE_SLOT, ",
                     l.layers_size(), " layers ", l.layer_bytes(), " bytes apart)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckLeaseParts(const v1::KvLease& lease) {
  std::map<std::pair<int, int>, int> count;
  for (int i = 0; i < lease.parts_size(); ++i) {
    const v1::StatePart& part = lease.parts(i);
    const std::string where =
        absl::StrCat("lease ", lease.lease_id(), " part ", i, " (", StatePartName(part.role()), " ",
                     StatePartKindName(part.kind()), ")");
    if (part.role() != v1::STATE_PART_ROLE_TARGET && part.role() != v1::STATE_PART_ROLE_DRAFTER) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has no role"));
    }
    if (part.role() == v1::STATE_PART_ROLE_TARGET && !part.required()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " must be required"));
    }
    if (part.kind() == v1::STATE_PART_KIND_PAGED_KV) {
      if (absl::Status s = CheckPagedKv(where, part); !s.ok()) return s;
    } else if (part.kind() == v1::STATE_PART_KIND_STATE_SLOT) {
      if (absl::Status s = CheckStateSlot(where, part); !s.ok()) return s;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " has kind ", v1::StatePartKind_Name(part.kind()),
                       "; this worker writes STATE_PART_KIND_PAGED_KV and "
                       "STATE_PART_KIND_STATE_SLOT parts only"));
    }
    if (++count[{part.role(), part.kind()}] > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " repeats a (role, kind); a lease holds at most one part of each"));
    }
  }
  const int target = count[{v1::STATE_PART_ROLE_TARGET, v1::STATE_PART_KIND_PAGED_KV}];
  if (target != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease ", lease.lease_id(), " has ", target,
                     " target paged KV parts; a lease holds exactly one"));
  }
  return absl::OkStatus();
}

std::string StateSlotLayoutMismatch(const v1::StateSlotLayout& got,
                                    const v1::StateSlotLayout& mine) {
  std::vector<std::string> diffs;
  if (got.architecture() != mine.architecture()) {
    diffs.push_back(absl::StrCat("architecture ", got.architecture(), " vs this worker's ",
                                 mine.architecture()));
  }
  if (got.layers_size() != mine.layers_size() ||
      !std::equal(got.layers().begin(), got.layers().end(), mine.layers().begin())) {
    diffs.push_back(absl::StrCat("layers [", absl::StrJoin(got.layers(), ","),
                                 "] vs this worker's [", absl::StrJoin(mine.layers(), ","), "]"));
  }
  if (got.layer_bytes() != mine.layer_bytes()) {
    diffs.push_back(
        absl::StrCat("layer_bytes ", got.layer_bytes(), " vs this worker's ", mine.layer_bytes()));
  }
  if (got.dtype() != mine.dtype()) {
    diffs.push_back(absl::StrCat("dtype ", got.dtype(), " vs this worker's ", mine.dtype()));
  }
  return absl::StrJoin(diffs, "; ");
}

void CommitPart(v1::KvCommit* commit, v1::StatePartRole role, const std::string& skipped,
                v1::StatePartKind kind) {
  v1::StatePartCommit* c = commit->add_parts();
  c->set_role(role);
  c->set_written(skipped.empty());
  c->set_skipped(skipped);
  if (kind != v1::STATE_PART_KIND_PAGED_KV) c->set_kind(kind);
}

namespace {

const v1::StatePartCommit* FindCommit(const v1::KvCommit& commit, v1::StatePartRole role,
                                      v1::StatePartKind kind) {
  for (const v1::StatePartCommit& c : commit.parts()) {
    // A commit from before kinds existed names only paged KV parts.
    const v1::StatePartKind k =
        c.kind() == v1::STATE_PART_KIND_UNSPECIFIED ? v1::STATE_PART_KIND_PAGED_KV : c.kind();
    if (c.role() == role && k == kind) return &c;
  }
  return nullptr;
}

}  // namespace

bool PartWritten(const v1::KvCommit& commit, v1::StatePartRole role, v1::StatePartKind kind) {
  const v1::StatePartCommit* c = FindCommit(commit, role, kind);
  return c != nullptr && c->written();
}

std::string PartSkipped(const v1::KvCommit& commit, v1::StatePartRole role,
                        v1::StatePartKind kind) {
  const v1::StatePartCommit* c = FindCommit(commit, role, kind);
  return c == nullptr ? std::string() : c->skipped();
}

}  // namespace dq::worker
