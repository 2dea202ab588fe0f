// ModelRunner: a model's weights bound to a backend, its KV pool and its threads. Prefill and
// decode may use different weights (full disaggregation) or the same stored weights in
// different compute modes (format disaggregation); they always share the KV cache.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/thread_pool.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/kvcache/kv_block_pool.h"
#include "engine/model/batch.h"
#include "engine/model/decoder_model.h"
#include "engine/model/model_config.h"
#include "engine/sampler/sampler.h"

namespace dq {

// Both phases' forward models on a backend other than the CPU.
struct BackendModels {
  std::shared_ptr<ForwardModel> prefill;
  std::shared_ptr<ForwardModel> decode;
};
// Builds them from the CPU-bound models (whose weights are read, not kept): e.g. engine/cuda's
// CudaBackendFactory. The two models share one KV cache laid out as `kv` describes; the runner's
// pool then only hands out block ids (it keeps no host KV storage).
using BackendFactory = std::function<absl::StatusOr<BackendModels>(
    const DecoderModel& prefill, const DecoderModel& decode, const KvCacheOptions& kv)>;

struct ModelRunnerOptions {
  int threads = 0;         // 0: one per hardware thread
  int kv_block_size = 16;  // tokens per KV block
  int kv_capacity = 0;     // tokens the KV pool holds in all; 0: min(context, 8192)
  // Sequences a hybrid model (one with per-sequence recurrent state) holds at once: its state
  // slots; 0: 16. Unused by pure-attention models.
  int state_slots = 0;
  BackendFactory backend;  // empty: the CPU backend
  // The CPU backend's prefill model (with an empty `backend`; a device backend takes its own
  // options, e.g. cuda::CudaBackendOptions::fp8_attention). Create fails with InvalidArgument
  // when the prefill weights cannot take them (DecoderModel::SetOptions).
  DecoderModelOptions cpu_prefill;
  // The CPU backend's models of both phases round activations as CUDA stores them
  // (DecoderModelOptions::bf16_activations): the GPU tests' reference for quantized modes.
  bool cpu_bf16_activations = false;
  // The CPU backend's fast decode path in both phases' models (DecoderModelOptions::q8_decode).
  bool cpu_q8_decode = false;
};

// The weights one phase computes with. The checkpoint must outlive the runner (weights are
// used in place from its mapping).
struct PhaseWeights {
  const Checkpoint* checkpoint = nullptr;
  const ModelConfig* config = nullptr;
  ComputeMode mode = ComputeMode::kWeightOnly;
  // The lm_head's format (engine/quant/requantize.h, LmHeadFormat): "bf16" or empty keeps it as
  // the checkpoint stores it; a weight-only scheme ("int8", "int4", ...) quantizes it at load.
  std::string lm_head;
};

class ModelRunner {
 public:
  // One model for both phases, weight-only compute.
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(const Checkpoint& checkpoint,
                                                             const ModelConfig& config,
                                                             const ModelRunnerOptions& options);
  // Per-phase weights and compute modes. Errors: the two KV layouts (architecture, layers, KV
  // heads, head dim) or vocabularies differ, or a compute mode the stored format cannot do.
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(const PhaseWeights& prefill,
                                                             const PhaseWeights& decode,
                                                             const ModelRunnerOptions& options);

  const ModelConfig& config() const { return decode_->config(); }
  // What each sequence owns, as the decode model's program declares it (the KV pool and the
  // state slots are sized from it; the workers' sequence manifest describes it).
  const SequenceStateSpec& sequence_state() const { return sequence_state_; }
  KvBlockPool& kv_pool() { return pool_; }
  ThreadPool& threads() { return threads_; }
  // "cpu" or "cuda".
  std::string_view backend() const { return decode_->backend(); }
  // The forward model that runs `phase` (a worker reaches its backend's KV cache through it).
  const ForwardModel& forward_model(Phase phase) const { return model(phase); }

  // Whether the CPU backend runs prefill passes with emulated FP8 attention
  // (ModelRunnerOptions::cpu_prefill); false on other backends.
  bool CpuPrefillUsesFp8Attention() const {
    return cpu_prefill_ != nullptr && cpu_prefill_->options().fp8_prefill_attention;
  }

  // Observes the prefill model's linear-layer inputs (calibration); {} removes it. CPU backend
  // only (FailedPrecondition otherwise).
  absl::Status SetPrefillObserver(LinearObserver observer);

  // One forward pass; Phase::kPrefill batches run on the prefill weights, kDecode on the decode
  // weights. See ForwardModel::Forward.
  absl::Status Forward(const Batch& batch, BatchLogits* logits, const ForwardHooks& hooks = {}) {
    return model(batch.phase).Forward(batch, pool_, threads_, logits, hooks);
  }

  // Whether `phase`'s model picks tokens on the device (ForwardModel::ForwardSample).
  bool SupportsDeviceSampling(Phase phase) const { return model(phase).SupportsDeviceSampling(); }
  // See ForwardModel::ForwardSample.
  absl::Status ForwardSample(const Batch& batch, std::span<const DeviceSampling> per_item,
                             std::span<int32_t> out_tokens, const ForwardHooks& hooks = {}) {
    return model(batch.phase).ForwardSample(batch, pool_, threads_, per_item, out_tokens, hooks);
  }

  // One forward pass ending in one token per item: tokens[i] is picked with samplers[i] (one
  // sampler and one token slot per item; the caller Accept()s). On the device (ForwardSample)
  // when the phase's model can, `logits` is null, no item is all_logits and every sampler is
  // DeviceSamplable; then only token ids leave the device. Otherwise Forward and
  // Sampler::Sample on the host, leaving the raw logits in `logits` (when not null) for
  // logprobs. Either way each sampler draws exactly one random number, so a seeded sequence's
  // stream does not depend on the path taken.
  absl::Status ForwardAndSample(const Batch& batch, std::span<Sampler* const> samplers,
                                std::span<int32_t> tokens, BatchLogits* logits = nullptr,
                                const ForwardHooks& hooks = {});

 private:
  ModelRunner(std::shared_ptr<ForwardModel> prefill, std::shared_ptr<ForwardModel> decode,
              std::shared_ptr<DecoderModel> cpu_prefill, const KvCacheOptions& kv, int threads)
      : prefill_(std::move(prefill)),
        decode_(std::move(decode)),
        cpu_prefill_(std::move(cpu_prefill)),
        pool_(kv),
        threads_(threads) {}
  const ForwardModel& model(Phase phase) const {
    return phase == Phase::kPrefill ? *prefill_ : *decode_;
  }
  // Whether ForwardAndSample may take the device path for this batch.
  bool CanSampleOnDevice(const Batch& batch, std::span<Sampler* const> samplers,
                         const BatchLogits* logits) const;

  std::shared_ptr<ForwardModel> prefill_;
  std::shared_ptr<ForwardModel> decode_;
  std::shared_ptr<DecoderModel> cpu_prefill_;  // null on other backends
  KvBlockPool pool_;
  ThreadPool threads_;
  SequenceStateSpec sequence_state_;
};

}  // namespace dq
