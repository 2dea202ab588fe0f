#include "worker_common/drafter_weights.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "engine/spec/draft_model.h"
#include "worker_common/sequence_manifest.h"

namespace dq::worker {
namespace {

// FNV-1a, 64 bits: stable across builds and machines (std::hash is not).
class Fnv1a {
 public:
  void Add(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ull;
  }
  void Add(std::string_view s) {
    Add(s.data(), s.size());
    Add("\0", 1);
  }
  void Add(int64_t v) { Add(&v, sizeof v); }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

constexpr int64_t kSampleBytes = 4096;

void AddTensors(const Checkpoint& checkpoint, Fnv1a& h) {
  for (const TensorView& t : checkpoint.tensors()) {
    h.Add(t.name);
    h.Add(DTypeName(t.dtype));
    for (int64_t d : t.shape) h.Add(d);
    h.Add(t.nbytes);
    if (t.data == nullptr || t.nbytes <= 0) continue;
    const int64_t n = std::min(kSampleBytes, t.nbytes);
    for (int64_t at : {int64_t{0}, (t.nbytes - n) / 2, t.nbytes - n}) h.Add(t.data + at, n);
  }
}

std::string Hex(uint64_t v) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(v));
  return hex;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadDrafterWeights(const PhaseModel& pm,
                                                          const DrafterWeightsOptions& o,
                                                          int threads) {
  DraftModelOptions d;
  d.format = o.format;
  d.group_size = o.group_size;
  d.weights = o.weights;
  d.threads = threads;
  return LoadDraftModel(*pm.model, d);
}

std::string DrafterFingerprint(const Model& draft) {
  Fnv1a h;
  const ModelConfig& c = draft.config;
  h.Add(c.architecture);
  for (int64_t v : {int64_t{c.num_layers}, int64_t{c.num_kv_heads}, int64_t{c.head_dim},
                    int64_t{c.vocab_size}}) {
    h.Add(v);
  }
  AddTensors(*draft.checkpoint, h);
  return absl::StrCat(StorageScheme(draft), ":", Hex(h.value()));
}

std::string DFlashFingerprint(const DFlashConfig& config, const Checkpoint& draft) {
  Fnv1a h;
  const ModelConfig& c = config.layers;
  h.Add("dflash");
  for (int64_t v : {int64_t{c.num_layers}, int64_t{c.hidden_size}, int64_t{c.num_kv_heads},
                    int64_t{c.head_dim}, int64_t{config.block_size}, int64_t{config.mask_token_id},
                    int64_t{config.num_target_layers}}) {
    h.Add(v);
  }
  for (int id : config.target_layer_ids) h.Add(int64_t{id});
  AddTensors(draft, h);
  return absl::StrCat("dflash:", Hex(h.value()));
}

dqserve::v1::KvLayout DrafterKvLayout(ModelRunner& runner, const KvStaging& staging) {
  return PagedKvLayout(runner.config().architecture, runner.config().num_layers,
                       runner.kv_pool().options(), staging.kv_dtype(),
                       runner.sequence_state().kv_layer_ids);
}

dqserve::v1::KvLayout DrafterKvLayout(const std::string& architecture, const KvBlockPool& pool,
                                      const KvStaging& staging) {
  return PagedKvLayout(architecture, pool.options().num_layers, pool.options(), staging.kv_dtype());
}

}  // namespace dq::worker
