// The decoder forward pass on the GPU: the same graph as the CPU's DecoderModel (llama, qwen3),
// with bf16 activations, an fp32 residual stream, a paged bf16 KV cache in the pool's layout,
// each linear layer in its stored format (linear.h), and the decode step captured in a CUDA
// graph per batch size. CudaBackendFactory plugs it into ModelRunner.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "engine/cuda/device_buffer.h"
#include "engine/cuda/kv_cache.h"
#include "engine/cuda/linear.h"
#include "engine/model/decoder_model.h"
#include "engine/model/model_runner.h"

namespace dq::cuda {

struct CudaBackendOptions {
  int device = 0;
  // Largest number of tokens in one forward pass (prefill chunks); larger batches are split
  // by the caller (the prefill worker's token budget) or fail with a clear error.
  int max_batch_tokens = 8192;
  // Largest decode batch captured as a CUDA graph; bigger decode batches run uncaptured.
  int max_graph_batch = 8;
  bool use_graphs = true;
};

// The device KV cache both phases share: per layer, K and V regions in the pool's layout.
class DeviceKvCache {
 public:
  explicit DeviceKvCache(const KvCacheOptions& kv);
  KvCacheLayer layer(int l) const;
  const KvCacheOptions& options() const { return kv_; }
  int64_t bytes() const { return 2 * static_cast<int64_t>(k_.bytes()); }

 private:
  KvCacheOptions kv_;
  DeviceBuffer k_, v_;  // [layers][blocks][block_size][kv_heads][head_dim] bf16
};

// Device bytes of one phase's weights (for reports).
struct CudaModelStats {
  int64_t weight_bytes = 0;
  int64_t kv_cache_bytes = 0;
  int fused_qkv_layers = 0;
  int fused_gate_up_layers = 0;
};

// Device sampling's per-row inputs and outputs (parameters, uniforms, token ids): one device
// block and its pinned host image, so a step uploads every row's parameters with one copy and
// brings back only the ids.
struct SamplingBuffers {
  explicit SamplingBuffers(int64_t max_rows);
  ~SamplingBuffers();
  SamplingBuffers(const SamplingBuffers&) = delete;
  SamplingBuffers& operator=(const SamplingBuffers&) = delete;

  int64_t max_rows = 0;
  DeviceBuffer dev;
  char* host = nullptr;  // pinned, the same bytes as `dev`
};

class CudaDecoderModel : public ForwardModel {
 public:
  // Uploads `cpu`'s weights. The model keeps `kv` (shared with the other phase's model).
  static absl::StatusOr<std::unique_ptr<CudaDecoderModel>> Create(
      const DecoderModel& cpu, std::shared_ptr<DeviceKvCache> kv,
      const CudaBackendOptions& options);
  ~CudaDecoderModel() override;

  const ModelConfig& config() const override { return config_; }
  std::string_view backend() const override { return "cuda"; }
  absl::Status Forward(const Batch& batch, KvBlockPool& pool, ThreadPool& threads,
                       BatchLogits* logits, const ForwardHooks& hooks) const override;
  bool SupportsDeviceSampling() const override { return true; }
  // The logits stay on the device: argmax when every row is greedy, else SampleForward
  // (sampling.h); only the token ids are copied back.
  absl::Status ForwardSample(const Batch& batch, KvBlockPool& pool, ThreadPool& threads,
                             std::span<const DeviceSampling> per_item,
                             std::span<int32_t> out_tokens,
                             const ForwardHooks& hooks) const override;
  const CudaModelStats& stats() const { return stats_; }
  // The KV cache this model writes (shared with the other phase's model), and the stream its
  // forward passes run on: a worker copies a layer's KV pages out after an event recorded on it
  // (from ForwardHooks::on_layer_kv_written) and copies received KV in with its own stream.
  const DeviceKvCache& kv_cache() const { return *kv_; }
  cudaStream_t stream() const { return stream_; }

  struct Layer;
  struct Plan;
  struct Buffers;

 private:
  CudaDecoderModel() = default;
  absl::Status Upload(const DecoderModel& cpu);
  // Checks `batch`, flattens it into `plan` and the metadata image and enqueues its upload.
  // Holds mu_.
  absl::Status Prepare(const Batch& batch, const KvBlockPool& pool, Plan* plan) const;
  // Enqueues the pass up to the logits: a graph replay for small decode batches (returns true;
  // the logits are left in buf_->logits), else the layers and EnqueueLogits(plan, host_out).
  bool Launch(const Plan& plan, const ForwardHooks& hooks, float* host_out) const;
  // Enqueues the pick of one token per row of buf_->logits and the ids' copy to the pinned
  // staging; the caller synchronizes and reads them with TakeSampledIds.
  void EnqueueSampling(std::span<const DeviceSampling> per_item) const;
  void TakeSampledIds(std::span<int32_t> out) const;
  void EnqueueLayers(const Plan& plan, const ForwardHooks* hooks) const;
  // Projects the wanted rows to logits; with `host_out`, copies each chunk back as it is done.
  void EnqueueLogits(const Plan& plan, float* host_out) const;
  void RunDecodeGraph(const Plan& plan) const;

  ModelConfig config_;
  CudaBackendOptions options_;
  std::shared_ptr<DeviceKvCache> kv_;
  std::vector<Layer> layers_;
  DeviceBuffer embedding_;  // bf16 [vocab, hidden]
  DeviceBuffer final_norm_;
  DeviceLinear lm_head_;
  DeviceBuffer inv_freq_;
  CudaModelStats stats_;

  // Forward state: one stream, scratch buffers and captured graphs. Forward is serialized.
  mutable std::mutex mu_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<LinearContext> linear_;
  std::unique_ptr<Buffers> buf_;
  mutable std::map<int, cudaGraphExec_t> graphs_;      // by decode batch size
  mutable std::unique_ptr<SamplingBuffers> sampling_;  // made on the first ForwardSample
};

// Decode batches up to this size use the paged decode-attention kernel; larger ones the
// (variable-length) prefill kernel.
inline constexpr int kMaxDecodeSeqs = 64;

// A ModelRunner backend: both phases on the GPU sharing one device KV cache.
BackendFactory CudaBackendFactory(const CudaBackendOptions& options = {});

}  // namespace dq::cuda
