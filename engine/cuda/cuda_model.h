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
#include "engine/model/decode_schedule.h"
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
  // Decode steps compute each sequence's logits independently of its batch-mates: the decode
  // attention cuts contexts into fixed 256-key partitions (not into as many as fill the GPU for
  // the batch) and every linear of a decode step runs the row-invariant GEMV kernels. Then
  // greedy output does not depend on which requests share a step, and speculative decoding
  // equals plain decoding token for token at any batch size. Costs decode speed at larger
  // batches (bf16 linears leave cuBLASLt) and for mid-length contexts at batch 1.
  bool batch_invariant = false;
  // Prefill passes of a model whose linears all compute in FP8 (W8A8) run attention in FP8 too
  // (attention_prefill_fp8.h: e4m3 Q, K, V and P with per-channel / per-token scales; on the
  // H200 0.95 vs 1.51 ms per Qwen3-4B layer at 8K tokens). Changes the prefill's numerics (its
  // outputs move by a few percent of their scale), so it is off unless asked for; models of
  // other formats ignore it.
  bool fp8_attention = false;
  // Which kernel variants run where there is a choice (kernel_options.h; defaults: the measured
  // winners). Checked once at start-up with ValidateKernelOptions.
  KernelOptions kernels;
};

// The device KV cache both phases share: per layer, K and V regions in the pool's layout.
class DeviceKvCache {
 public:
  explicit DeviceKvCache(const KvCacheOptions& kv);
  KvCacheLayer layer(int l) const;
  const KvCacheOptions& options() const { return kv_; }
  // Each of K and V: the pool's layout in bf16.
  const KvTensorLayout& layout() const { return layout_; }
  int64_t bytes() const { return 2 * static_cast<int64_t>(k_.bytes()); }

 private:
  KvCacheOptions kv_;
  KvTensorLayout layout_;
  DeviceBuffer k_, v_;  // [layers][blocks][block_size][kv_heads][head_dim] bf16
};

class WeightStreamer;        // weight_stream.h
struct WeightStreamOptions;  // weight_stream.h

// Device bytes of one phase's weights (for reports).
struct CudaModelStats {
  // Device memory this model allocated for weights (with streaming: the slots, not the layers;
  // without the shared embedding/lm_head).
  int64_t weight_bytes = 0;
  int64_t streamed_image_bytes = 0;  // what one streamed pass copies in
  int64_t stream_slot_bytes = 0;     // all slots together
  int64_t shared_weight_bytes = 0;   // embedding + lm_head used in place from another model
  int64_t kv_cache_bytes = 0;
  int fused_qkv_layers = 0;
  int fused_gate_up_layers = 0;
  // The layers' device linears (a fused qkv or gate|up counts once), and those of them that
  // quantize their activations (W8A8 / W4A4): all of them when the phase computes in such a
  // mode (tests check the compute mode reached every layer).
  int layer_linears = 0;
  int act_quantized_linears = 0;
  bool fp8_attention = false;  // prefill attention runs in FP8 (CudaBackendOptions)
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

class CudaDecoderModel;
struct PersistentDecodeState;  // cuda_model_persistent.cpp
struct DeviceAttention;        // cuda_model_internal.h
struct DeviceMlp;
struct TapTarget;

// Where a model's weights live, when not all resident in its own memory (offloaded
// disaggregated prefill, docs/odp.md).
struct CudaWeightPlacement {
  // Set: the layers are not resident; each pass streams them (weight_stream.h).
  const WeightStreamOptions* stream = nullptr;
  // Set: the embedding and lm_head are used in place from this model, whose checkpoint stores
  // them with the same bytes (the caller checks: SameEmbeddings in odp_backend.h).
  std::shared_ptr<const CudaDecoderModel> share_embeddings;
  // Set: passes run on this model's stream, scratch buffers and lock instead of our own (two
  // phases on one GPU never run at once, so one set of activations serves both). Its
  // max_batch_tokens bounds ours.
  std::shared_ptr<const CudaDecoderModel> share_workspace;
};

class CudaDecoderModel : public ForwardModel {
 public:
  // Uploads `cpu`'s weights. The model keeps `kv` (shared with the other phase's model).
  static absl::StatusOr<std::unique_ptr<CudaDecoderModel>> Create(
      const DecoderModel& cpu, std::shared_ptr<DeviceKvCache> kv, const CudaBackendOptions& options,
      const CudaWeightPlacement& placement = {});
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
  // Null unless the layers are streamed (benchmarks drop its page cache between passes).
  const WeightStreamer* weight_streamer() const { return streamer_.get(); }
  // The decode batch sizes captured as CUDA graphs so far (tests: the graph path was taken);
  // with `row_split`, those of speculative verification passes (rows = tokens).
  // A size captured with several tap sets is listed once per set.
  std::vector<int> captured_decode_batches(bool row_split = false) const {
    std::lock_guard lock(*mu_);
    std::vector<int> sizes;
    for (const auto& [key, exec] : graphs_) {
      if (key.row_split == row_split) sizes.push_back(key.seqs);
    }
    return sizes;
  }

  // Whether decode steps of `batch` sequences can run as one persistent kernel
  // (persistent_decode.h; KernelOptions::persistent_decode turns it on): OK, or
  // FailedPrecondition saying what is not covered (a format, a shape, the batch size).
  absl::Status SupportsPersistentDecode(int batch) const;
  // The batch sizes whose decode steps ran persistent so far (tests: the path was taken).
  std::vector<int> persistent_decode_batches() const;
  // Diagnostics (dq-bench-gpu --persistent-trace). While on, persistent steps record when each
  // task started, passed its wait and signalled. Set it before the first decode step of a batch
  // size: a captured step keeps what it was captured with.
  struct PersistentTaskTime {
    DecodeTaskKind kind = DecodeTaskKind::kQkv;
    int layer = 0, stage = 0, worker = 0;
    uint64_t start = 0, ready = 0, end = 0;  // the device's global timer, ns
  };
  void set_persistent_trace(bool on) { persistent_trace_ = on; }
  // The latest traced step of `batch` sequences, one entry per task in schedule order (waits
  // for the stream); NotFound when no such step ran traced.
  absl::StatusOr<std::vector<PersistentTaskTime>> PersistentDecodeTrace(int batch) const;

  struct Layer;
  struct Plan;
  struct Buffers;

 private:
  CudaDecoderModel();
  absl::Status Upload(const DecoderModel& cpu, const CudaWeightPlacement& placement);
  // Checks `batch`, flattens it into `plan` and the metadata image and enqueues its upload.
  // Holds mu_.
  absl::Status Prepare(const Batch& batch, const KvBlockPool& pool, Plan* plan) const;
  // Enqueues the pass up to the logits: a graph replay for small decode batches (returns true;
  // the logits are left in buf_->logits), else the layers and EnqueueLogits(plan, host_out).
  // Errors (a streamed layer that could not be read) leave nothing in flight.
  // `taps`' layers are copied to *taps_out (TapTarget's layout) for DeliverTaps after the
  // caller synchronizes.
  absl::StatusOr<bool> Launch(const Plan& plan, const ForwardHooks& hooks, float* host_out,
                              const TapSet& taps, float** taps_out) const;
  // The pinned buffer a pass's taps land in (null without taps); a graphed pass's is fixed.
  float* TapBuffer(const Plan& plan, const TapSet& taps, bool graph) const;
  // Hands each tapped layer's rows to hooks.on_layer_output, in ascending layer order.
  void DeliverTaps(const Plan& plan, const TapSet& taps, const float* out,
                   const ForwardHooks& hooks) const;
  // Enqueues the pick of one token per row of buf_->logits and the ids' copy to the pinned
  // staging; the caller synchronizes and reads them with TakeSampledIds.
  void EnqueueSampling(std::span<const DeviceSampling> per_item) const;
  void TakeSampledIds(std::span<int32_t> out) const;
  absl::Status EnqueueLayers(const Plan& plan, const ForwardHooks* hooks,
                             const TapTarget& taps) const;
  // A layer is its blocks, each enqueued by the kernels of its type.
  void EnqueueLayer(const Layer& L, const Plan& plan, const ForwardHooks* hooks) const;
  void EnqueueAttention(const DeviceAttention& a, const Plan& plan,
                        const ForwardHooks* hooks) const;
  // The attention of `q` over the cache (decode, prefill or FP8 prefill kernels, per `plan`).
  void EnqueueAttentionCore(const Plan& plan, const __nv_bfloat16* q, int64_t q_stride,
                            __nv_bfloat16* attn, const KvCacheLayer& cache) const;
  void EnqueueMlp(const DeviceMlp& m, const Plan& plan) const;
  // Whether `w` runs its row-invariant kernels in this pass (batch-invariant decode,
  // speculative verification rows).
  bool RowInvariant(const DeviceLinear& w, const Plan& plan) const;
  // Projects the wanted rows to logits; with `host_out`, copies each chunk back as it is done.
  void EnqueueLogits(const Plan& plan, float* host_out) const;
  void RunDecodeGraph(const Plan& plan, const TapTarget& taps, bool persistent) const;
  // Whether this step runs persistent (the option, the model, the plan); builds the step's
  // schedule on first use (outside capture). Holds mu_.
  bool PreparePersistentDecode(const Plan& plan, const TapTarget& taps) const;
  // The embedding and the persistent kernel: logits of every row in buf_->logits.
  void EnqueuePersistentStep(const Plan& plan) const;

  ModelConfig config_;
  CudaBackendOptions options_;
  std::shared_ptr<DeviceKvCache> kv_;
  std::vector<Layer> layers_;                                 // empty when streamed
  std::unique_ptr<WeightStreamer> streamer_;                  // set when streamed
  std::shared_ptr<const CudaDecoderModel> embeddings_owner_;  // set when shared
  DeviceBuffer embedding_;                                    // bf16 [vocab, hidden]
  DeviceBuffer final_norm_;
  DeviceLinear lm_head_;
  DeviceBuffer inv_freq_;
  CudaModelStats stats_;

  // Allocates the stream, scratch and lock (AllocateWorkspace) or takes another model's.
  void AllocateWorkspace();
  absl::Status ShareWorkspace(const CudaDecoderModel& peer);
  // With stats_.fp8_attention: FP8 prefill attention's workspace in the (maybe shared) scratch.
  void AllocateFp8AttentionWorkspace();
  // Fills the FP8 attention tile offsets into the host metadata and decides plan->fp8_attention.
  void PlanFp8Attention(Plan* plan) const;

  // Forward state: one stream, scratch buffers and captured graphs. Forward is serialized by
  // mu_, which a model sharing the workspace shares too.
  std::shared_ptr<std::mutex> mu_;
  std::shared_ptr<CUstream_st> stream_owner_;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<LinearContext> linear_;
  std::shared_ptr<Buffers> buf_;
  // A captured decode step: a verification pass's linears differ (LinearArgs), and tapped
  // layers add copies.
  struct GraphKey {
    int seqs = 0;
    bool row_split = false;
    std::vector<int> taps;
    auto operator<=>(const GraphKey&) const = default;
  };
  mutable std::map<GraphKey, cudaGraphExec_t> graphs_;
  mutable std::unique_ptr<SamplingBuffers> sampling_;          // made on the first ForwardSample
  mutable std::shared_ptr<PersistentDecodeState> persistent_;  // made on the first such step
  bool persistent_trace_ = false;
};

// Decode batches up to this size use the paged decode-attention kernel; larger ones the
// (variable-length) prefill kernel.
inline constexpr int kMaxDecodeSeqs = 64;

// A ModelRunner backend: both phases on the GPU sharing one device KV cache.
BackendFactory CudaBackendFactory(const CudaBackendOptions& options = {});

}  // namespace dq::cuda
