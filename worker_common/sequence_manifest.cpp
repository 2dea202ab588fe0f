#include "worker_common/sequence_manifest.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "worker_common/lease_parts.h"
#include "worker_common/worker_identity.h"
#include "worker_common/worker_status.h"

namespace dq::worker {
namespace v1 = dqserve::v1;

int KvDtypeBytes(std::string_view dtype) {
  if (dtype == "f32") return 4;
  if (dtype == "bf16" || dtype == "f16") return 2;
  if (dtype == "fp8_e4m3") return 1;
  return 0;
}

v1::KvLayout PagedKvLayout(const std::string& architecture, int num_layers,
                           const KvCacheOptions& pool, std::string_view dtype,
                           std::span<const int> layers) {
  v1::KvLayout l;
  l.set_architecture(architecture);
  l.set_num_layers(static_cast<uint32_t>(num_layers));
  l.set_num_kv_heads(static_cast<uint32_t>(pool.num_kv_heads));
  l.set_head_dim(static_cast<uint32_t>(pool.head_dim));
  l.set_kv_dtype(std::string(dtype));
  l.set_block_size(static_cast<uint32_t>(pool.block_size));
  if (layers.empty()) {
    for (int i = 0; i < pool.num_layers; ++i) l.add_layers(static_cast<uint32_t>(i));
  } else {
    for (int i : layers) l.add_layers(static_cast<uint32_t>(i));
  }
  return l;
}

v1::StatePart PagedKvPart(v1::StatePartRole role, v1::KvLayout layout, std::string fingerprint) {
  v1::StatePart p;
  p.set_role(role);
  p.set_kind(v1::STATE_PART_KIND_PAGED_KV);
  p.set_required(role == v1::STATE_PART_ROLE_TARGET);
  *p.mutable_kv_layout() = std::move(layout);
  p.set_fingerprint(std::move(fingerprint));
  return p;
}

v1::StatePart StateSlotPart(v1::StateSlotLayout layout) {
  v1::StatePart p;
  p.set_role(v1::STATE_PART_ROLE_TARGET);
  p.set_kind(v1::STATE_PART_KIND_STATE_SLOT);
  p.set_required(true);
  *p.mutable_slot_layout() = std::move(layout);
  return p;
}

uint64_t PartLayerBytes(const v1::StatePart& part) {
  if (part.kind() == v1::STATE_PART_KIND_STATE_SLOT) return part.slot_layout().layer_bytes();
  if (part.kind() != v1::STATE_PART_KIND_PAGED_KV) return 0;
  const v1::KvLayout& l = part.kv_layout();
  return uint64_t{l.block_size()} * l.num_kv_heads() * l.head_dim() * KvDtypeBytes(l.kv_dtype());
}

uint64_t PartSequenceBytes(const v1::StatePart& part, int tokens) {
  if (part.kind() == v1::STATE_PART_KIND_STATE_SLOT) return StateSlotBytes(part.slot_layout());
  const v1::KvLayout& l = part.kv_layout();
  if (l.block_size() == 0) return 0;
  const uint64_t blocks =
      (static_cast<uint64_t>(std::max(tokens, 0)) + l.block_size() - 1) / l.block_size();
  const uint64_t layers = l.layers_size() > 0 ? l.layers_size() : l.num_layers();
  return 2 * layers * blocks * PartLayerBytes(part);  // K and V
}

v1::SequenceManifest ManifestOf(const PhaseModel& pm) {
  v1::SequenceManifest m;
  *m.add_parts() = PagedKvPart(v1::STATE_PART_ROLE_TARGET, KvLayoutOf(pm));
  if (pm.state_slot) *m.add_parts() = StateSlotPart(*pm.state_slot);
  SealManifest(&m);
  return m;
}

void AddManifestPart(v1::SequenceManifest* manifest, v1::StatePart part) {
  *manifest->add_parts() = std::move(part);
  SealManifest(manifest);
}

namespace {

uint64_t Fnv1a64(std::string_view bytes, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// "target paged KV", "drafter paged KV", "target state slot".
std::string PartTitle(const v1::StatePart& p) {
  return absl::StrCat(StatePartName(p.role()), " ", StatePartKindName(p.kind()));
}

const v1::StatePart* FindManifestPart(const v1::SequenceManifest& m, v1::StatePartRole role,
                                      v1::StatePartKind kind) {
  for (const v1::StatePart& p : m.parts()) {
    if (p.role() == role && p.kind() == kind) return &p;
  }
  return nullptr;
}

// The layout's KV layers; an older worker's empty list means 0..num_layers-1.
std::vector<uint32_t> KvLayers(const v1::KvLayout& l) {
  if (l.layers_size() > 0) return {l.layers().begin(), l.layers().end()};
  std::vector<uint32_t> all(l.num_layers());
  for (uint32_t i = 0; i < l.num_layers(); ++i) all[i] = i;
  return all;
}

std::string KvLayerList(const std::vector<uint32_t>& layers) {
  return absl::StrCat("[", absl::StrJoin(layers, ","), "]");
}

// The clauses of the parts in `want` (or, with `required`, only the required ones) that `have`
// lacks or lays out otherwise, then those only `have` holds.
std::vector<std::string> PartDiffs(const v1::SequenceManifest& want,
                                   const v1::SequenceManifest& have, std::string_view peer,
                                   bool required) {
  std::vector<std::string> diffs;
  for (const v1::StatePart& w : want.parts()) {
    if (w.required() != required) continue;
    const v1::StatePart* h = FindManifestPart(have, w.role(), w.kind());
    if (h == nullptr) {
      diffs.push_back(absl::StrCat(PartTitle(w), ": only ", std::string(peer), " has it"));
    } else if (std::string d = PartLayoutMismatch(w, *h); !d.empty()) {
      diffs.push_back(absl::StrCat(PartTitle(w), ": ", d));
    }
  }
  for (const v1::StatePart& h : have.parts()) {
    if (h.required() != required) continue;
    if (FindManifestPart(want, h.role(), h.kind()) == nullptr) {
      diffs.push_back(absl::StrCat(PartTitle(h), ": only this worker has it"));
    }
  }
  return diffs;
}

}  // namespace

void SealManifest(v1::SequenceManifest* manifest) {
  uint64_t h = Fnv1a64("dq-manifest-v1");
  for (const v1::StatePart& p : manifest->parts()) {
    // Only what a manifest part holds: blocks, endpoints and cached tokens are a lease's.
    v1::StatePart layout;
    layout.set_role(p.role());
    layout.set_kind(p.kind());
    layout.set_required(p.required());
    layout.set_fingerprint(p.fingerprint());
    if (p.has_kv_layout()) *layout.mutable_kv_layout() = p.kv_layout();
    if (p.has_slot_layout()) *layout.mutable_slot_layout() = p.slot_layout();
    std::string bytes;
    layout.SerializeToString(&bytes);
    h = Fnv1a64(bytes, Fnv1a64(absl::StrCat(bytes.size(), ":"), h));
  }
  manifest->set_hash(absl::StrFormat("%016x", h));
}

std::string PartLayoutMismatch(const v1::StatePart& got, const v1::StatePart& mine) {
  std::vector<std::string> diffs;
  if (got.kind() != mine.kind()) {
    diffs.push_back(absl::StrCat("kind ", StatePartKindName(got.kind()), " vs this worker's ",
                                 StatePartKindName(mine.kind())));
  } else if (mine.kind() == v1::STATE_PART_KIND_STATE_SLOT) {
    if (std::string d = StateSlotLayoutMismatch(got.slot_layout(), mine.slot_layout());
        !d.empty()) {
      diffs.push_back(std::move(d));
    }
  } else {
    const v1::KvLayout& g = got.kv_layout();
    const v1::KvLayout& m = mine.kv_layout();
    if (std::string d = KvLayoutMismatch(g, m); !d.empty()) {
      diffs.push_back(std::move(d));
    } else if (KvLayers(g) != KvLayers(m)) {
      diffs.push_back(absl::StrCat("KV layers ", KvLayerList(KvLayers(g)), " vs this worker's ",
                                   KvLayerList(KvLayers(m))));
    }
  }
  if (got.fingerprint() != mine.fingerprint()) {
    diffs.push_back(absl::StrCat("weights ", got.fingerprint().empty() ? "-" : got.fingerprint(),
                                 " vs this worker's ",
                                 mine.fingerprint().empty() ? "-" : mine.fingerprint()));
  }
  return absl::StrJoin(diffs, "; ");
}

std::string ManifestMismatch(const v1::SequenceManifest& expected, const v1::SequenceManifest& mine,
                             std::string_view peer) {
  return absl::StrJoin(PartDiffs(expected, mine, peer, /*required=*/true), "; ");
}

std::string OptionalPartDifferences(const v1::SequenceManifest& expected,
                                    const v1::SequenceManifest& mine, std::string_view peer) {
  return absl::StrJoin(PartDiffs(expected, mine, peer, /*required=*/false), "; ");
}

absl::Status CheckManifest(const v1::SequenceManifest& expected, const v1::SequenceManifest& mine,
                           std::string_view peer) {
  const std::string diff = ManifestMismatch(expected, mine, peer);
  if (diff.empty()) return absl::OkStatus();
  return WithFailureReason(
      absl::FailedPreconditionError(absl::StrCat(
          "sequence manifests differ (", std::string(peer), "'s ", expected.hash(),
          ", this worker's ", mine.hash(), "): ", diff,
          "; a sequence's state written by one worker would be garbage to the other: run both "
          "workers on the same model architecture with the same KV dtype and block size")),
      v1::FAILURE_REASON_MANIFEST_MISMATCH);
}

}  // namespace dq::worker
