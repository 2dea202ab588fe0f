// CudaDecoderModel::ForwardSample: the forward pass up to the logits (shared with Forward), then
// one token per row picked on the device, so a decode step copies back a few int32 ids instead
// of rows of vocab floats.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/cuda_model_internal.h"
#include "engine/cuda/sampling.h"
#include "engine/sampler/sampler.h"

namespace dq::cuda {
namespace {

// Byte offsets of each per-row array inside SamplingBuffers for `rows` rows; the uniforms come
// first so they stay 8-byte aligned. Everything before `ids` is uploaded in one copy.
struct SamplingLayout {
  explicit SamplingLayout(int64_t rows)
      : uniform(0),
        temperature(8 * rows),
        top_p(12 * rows),
        min_p(16 * rows),
        top_k(20 * rows),
        ids(24 * rows),
        end(28 * rows) {}
  int64_t uniform, temperature, top_p, min_p, top_k, ids, end;
};

bool Greedy(const DeviceSampling& d) { return d.temperature < kGreedyTemperature; }

// The ranges Validate() (sampler.h) enforces: the kernels assume them.
absl::Status CheckSampling(std::span<const DeviceSampling> per_item) {
  for (size_t i = 0; i < per_item.size(); ++i) {
    const DeviceSampling& d = per_item[i];
    const bool ok = d.temperature >= 0.0f && d.temperature <= 2.0f && d.top_p > 0.0f &&
                    d.top_p <= 1.0f && d.min_p >= 0.0f && d.min_p <= 1.0f && d.uniform >= 0.0 &&
                    d.uniform < 1.0;  // NaNs fail every comparison
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("item ", i, ": device sampling parameters out of range (temperature ",
                       d.temperature, ", top_p ", d.top_p, ", min_p ", d.min_p, ", uniform ",
                       d.uniform, "); validate the request's SamplingParams first"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

SamplingBuffers::SamplingBuffers(int64_t rows)
    : max_rows(rows), dev(static_cast<size_t>(SamplingLayout(rows).end)) {
  CUDA_CHECK(cudaMallocHost(&host, static_cast<size_t>(SamplingLayout(rows).end)));
}

SamplingBuffers::~SamplingBuffers() {
  if (host != nullptr) cudaFreeHost(host);
}

absl::Status CudaDecoderModel::ForwardSample(const Batch& batch, KvBlockPool& pool, ThreadPool&,
                                             std::span<const DeviceSampling> per_item,
                                             std::span<int32_t> out_tokens,
                                             const ForwardHooks& hooks) const {
  if (per_item.size() != batch.items.size() || out_tokens.size() != batch.items.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ForwardSample: ", batch.items.size(), " batch items but ", per_item.size(),
        " sampling entries and ", out_tokens.size(), " token slots; pass one of each per item"));
  }
  for (const BatchItem& it : batch.items) {
    if (it.all_logits) {
      return absl::InvalidArgumentError(
          "ForwardSample picks from one logits row per item; run all_logits items through "
          "Forward");
    }
  }
  DQ_RETURN_IF_ERROR(CheckSampling(per_item));
  std::lock_guard lock(*mu_);
  Plan plan;
  DQ_RETURN_IF_ERROR(Prepare(batch, pool, &plan));
  if (sampling_ == nullptr) sampling_ = std::make_unique<SamplingBuffers>(buf_->cap_seqs);
  // One row per item, and Prepare caps items at cap_seqs <= cap_rows: every row's logits are in
  // buf_->logits at once after Launch (EnqueueLogits works in chunks of cap_rows).
  if (plan.num_logit_rows > std::min(buf_->cap_rows, sampling_->max_rows)) {
    return absl::InternalError(absl::StrCat("ForwardSample: ", plan.num_logit_rows,
                                            " logits rows exceed the buffers' ", buf_->cap_rows));
  }
  const TapSet taps(hooks, config_.num_layers);
  float* taps_out = nullptr;
  DQ_RETURN_IF_ERROR(Launch(plan, hooks, /*host_out=*/nullptr, taps, &taps_out).status());
  EnqueueSampling(per_item);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  TakeSampledIds(out_tokens);
  for (const BatchItem& it : batch.items) it.kv->num_tokens += static_cast<int>(it.tokens.size());
  DeliverTaps(plan, taps, taps_out, hooks);
  return absl::OkStatus();
}

void CudaDecoderModel::EnqueueSampling(std::span<const DeviceSampling> per_item) const {
  const SamplingBuffers& sb = *sampling_;
  const int64_t n = static_cast<int64_t>(per_item.size());
  const SamplingLayout at(n);
  char* dev = sb.dev.get<char>();
  LogitsView logits;
  logits.f32 = buf_->logits.get<float>();
  logits.rows = n;
  logits.vocab = config_.vocab_size;
  auto* ids = reinterpret_cast<int32_t*>(dev + at.ids);
  if (std::all_of(per_item.begin(), per_item.end(), Greedy)) {
    ArgmaxForward(logits, ids, stream_);  // nothing to upload
  } else {
    // Staged in pinned memory: a pageable upload would be copied by the driver first.
    char* h = sb.host;
    for (int64_t i = 0; i < n; ++i) {
      const DeviceSampling& d = per_item[i];
      std::memcpy(h + at.uniform + 8 * i, &d.uniform, 8);
      std::memcpy(h + at.temperature + 4 * i, &d.temperature, 4);
      std::memcpy(h + at.top_p + 4 * i, &d.top_p, 4);
      std::memcpy(h + at.min_p + 4 * i, &d.min_p, 4);
      std::memcpy(h + at.top_k + 4 * i, &d.top_k, 4);
    }
    CUDA_CHECK(cudaMemcpyAsync(dev, h, at.ids, cudaMemcpyHostToDevice, stream_));
    SamplingArgs a;
    a.logits = logits;
    a.uniform = reinterpret_cast<const double*>(dev + at.uniform);
    a.temperature = reinterpret_cast<const float*>(dev + at.temperature);
    a.top_p = reinterpret_cast<const float*>(dev + at.top_p);
    a.min_p = reinterpret_cast<const float*>(dev + at.min_p);
    a.top_k = reinterpret_cast<const int32_t*>(dev + at.top_k);
    a.out_ids = ids;
    SampleForward(a, stream_);
  }
  CUDA_CHECK(cudaMemcpyAsync(sb.host + at.ids, ids, n * 4, cudaMemcpyDeviceToHost, stream_));
}

void CudaDecoderModel::TakeSampledIds(std::span<int32_t> out) const {
  const SamplingLayout at(static_cast<int64_t>(out.size()));
  std::memcpy(out.data(), sampling_->host + at.ids, out.size() * 4);
}

}  // namespace dq::cuda
