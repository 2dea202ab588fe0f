#include "engine/model/model_runner.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "common/logging.h"
#include "engine/model/architecture.h"
#include "engine/quant/requantize.h"

namespace dq {
namespace {

// Sets every quantized layer's compute mode; the stored scheme must define it.
absl::Status ApplyComputeMode(ComputeMode mode, ModelProgram& program) {
  if (mode == ComputeMode::kWeightOnly) return absl::OkStatus();
  absl::Status status;
  program.ForEachLinear([&](LinearWeight& m) {
    if (!status.ok()) return;
    if (m.codec == nullptr || !m.codec->Supports(mode)) {
      const std::string stored =
          m.codec ? std::string(m.codec->scheme()) : std::string(DTypeName(m.dtype));
      status = absl::InvalidArgumentError(absl::StrCat(
          "compute mode ", ComputeModeName(mode), " needs ",
          mode == ComputeMode::kW8A8 ? "fp8" : "nvfp4", " weights, but this checkpoint's ",
          "linear layers are ", stored, "; quantize it with dq-quantize or use weight_only"));
      return;
    }
    m.mode = mode;
  });
  return status;
}

absl::StatusOr<std::shared_ptr<DecoderModel>> BuildModel(const PhaseWeights& p) {
  DQ_RETURN_IF_ERROR(p.config->Validate());
  DQ_ASSIGN_OR_RETURN(ModelProgram program, BindModelProgram(*p.checkpoint, *p.config));
  DQ_RETURN_IF_ERROR(ApplyComputeMode(p.mode, program));
  if (!KeepsStoredLmHead(p.lm_head)) {
    spdlog::info("quantizing lm_head [{} x {}] to {} (weight-only)", program.lm_head.out_features,
                 program.lm_head.in_features, p.lm_head);
    const auto start = std::chrono::steady_clock::now();
    DQ_ASSIGN_OR_RETURN(program.lm_head, RequantizeLinear(program.lm_head, p.lm_head));
    spdlog::info("lm_head quantized in {:.1f} s",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return std::make_shared<DecoderModel>(*p.config, std::move(program));
}

absl::Status CheckSameKvLayout(const ModelConfig& a, const ModelConfig& b) {
  auto differ = [](const char* what, auto x, auto y) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefill and decode models have different KV layouts: ", what, " ", x, " vs ",
                     y, "; both phases must be the same model architecture (weights may differ)"));
  };
  if (a.architecture != b.architecture)
    return differ("architecture", a.architecture, b.architecture);
  if (a.num_layers != b.num_layers) return differ("layers", a.num_layers, b.num_layers);
  if (a.num_kv_heads != b.num_kv_heads) return differ("KV heads", a.num_kv_heads, b.num_kv_heads);
  if (a.head_dim != b.head_dim) return differ("head dim", a.head_dim, b.head_dim);
  if (a.vocab_size != b.vocab_size) return differ("vocabulary", a.vocab_size, b.vocab_size);
  if (a.rope_theta != b.rope_theta) return differ("rope theta", a.rope_theta, b.rope_theta);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(
    const Checkpoint& checkpoint, const ModelConfig& config, const ModelRunnerOptions& options) {
  const PhaseWeights both{&checkpoint, &config, ComputeMode::kWeightOnly};
  return Create(both, both, options);
}

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(
    const PhaseWeights& prefill, const PhaseWeights& decode, const ModelRunnerOptions& options) {
  if (options.kv_block_size <= 0) {
    return absl::InvalidArgumentError("kv_block_size must be positive");
  }
  DQ_RETURN_IF_ERROR(CheckSameKvLayout(*prefill.config, *decode.config));
  DQ_ASSIGN_OR_RETURN(std::shared_ptr<DecoderModel> decode_model, BuildModel(decode));
  std::shared_ptr<DecoderModel> prefill_model = decode_model;
  if (prefill.checkpoint != decode.checkpoint || prefill.mode != decode.mode ||
      prefill.lm_head != decode.lm_head) {
    DQ_ASSIGN_OR_RETURN(prefill_model, BuildModel(prefill));
  }
  const ModelConfig& config = *decode.config;
  KvCacheOptions kv;
  kv.num_layers = decode_model->program().state().kv_layers;  // what the blocks declare
  kv.num_kv_heads = config.num_kv_heads;
  kv.head_dim = config.head_dim;
  kv.block_size = options.kv_block_size;
  const int capacity =
      options.kv_capacity > 0 ? options.kv_capacity : std::min(config.max_context, 8192);
  kv.num_blocks = (capacity + kv.block_size - 1) / kv.block_size;
  const SequenceStateSpec state = decode_model->program().state();
  if (state.has_slot()) {
    if (options.backend) {
      return absl::UnimplementedError(
          "this model keeps recurrent state per sequence (Gated DeltaNet layers), which only the "
          "CPU backend runs so far; run it on the CPU backend");
    }
    kv.state_slot_floats = state.slot_floats;
    kv.num_state_slots = options.state_slots > 0 ? options.state_slots : 16;
  }
  const int threads = options.threads > 0 ? options.threads : DefaultThreadCount();
  spdlog::debug("model runner: {} layers, KV pool {} blocks x {} tokens, {} threads",
                config.num_layers, kv.num_blocks, kv.block_size, threads);
  if (options.backend) {
    DQ_ASSIGN_OR_RETURN(BackendModels models, options.backend(*prefill_model, *decode_model, kv));
    kv.host_storage = false;  // the backend holds the cache; the pool hands out block ids
    std::unique_ptr<ModelRunner> runner(
        new ModelRunner(std::move(models.prefill), std::move(models.decode), nullptr, kv, threads));
    runner->sequence_state_ = state;
    return runner;
  }
  // Phase-gated (DecoderModelOptions), so a prefill model shared with decode is fine.
  DecoderModelOptions prefill_options = options.cpu_prefill;
  prefill_options.bf16_activations |= options.cpu_bf16_activations;
  prefill_options.q8_decode |= options.cpu_q8_decode;
  DQ_RETURN_IF_ERROR(prefill_model->SetOptions(prefill_options));
  if (decode_model != prefill_model) {
    DecoderModelOptions decode_options;
    decode_options.bf16_activations = prefill_options.bf16_activations;
    decode_options.q8_decode = prefill_options.q8_decode;
    DQ_RETURN_IF_ERROR(decode_model->SetOptions(decode_options));
  }
  std::unique_ptr<ModelRunner> runner(
      new ModelRunner(prefill_model, decode_model, prefill_model, kv, threads));
  runner->sequence_state_ = state;
  return runner;
}

bool ModelRunner::CanSampleOnDevice(const Batch& batch, std::span<Sampler* const> samplers,
                                    const BatchLogits* logits) const {
  if (logits != nullptr || !SupportsDeviceSampling(batch.phase)) return false;
  for (const BatchItem& it : batch.items) {
    if (it.all_logits) return false;
  }
  return std::all_of(samplers.begin(), samplers.end(),
                     [](const Sampler* s) { return s->DeviceSamplable(); });
}

absl::Status ModelRunner::ForwardAndSample(const Batch& batch, std::span<Sampler* const> samplers,
                                           std::span<int32_t> tokens, BatchLogits* logits,
                                           const ForwardHooks& hooks) {
  if (samplers.size() != batch.items.size() || tokens.size() != batch.items.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ForwardAndSample: ", batch.items.size(), " batch items but ", samplers.size(),
                     " samplers and ", tokens.size(), " token slots; pass one of each per item"));
  }
  if (CanSampleOnDevice(batch, samplers, logits)) {
    std::vector<DeviceSampling> per_item(samplers.size());
    for (size_t i = 0; i < samplers.size(); ++i) {
      const SamplingParams& p = samplers[i]->params();
      // Drawn before the pass, as Sample() would draw it after: the same (draws + 1)-th number.
      per_item[i] = {p.temperature, p.top_k, p.top_p, p.min_p, samplers[i]->DrawUniform()};
    }
    return ForwardSample(batch, per_item, tokens, hooks);
  }
  BatchLogits local;
  BatchLogits* out = logits != nullptr ? logits : &local;
  DQ_RETURN_IF_ERROR(Forward(batch, out, hooks));
  // Sample() scribbles over its input; the caller's logprobs come from the untouched rows.
  std::vector<float> row(out->vocab);
  for (size_t i = 0; i < samplers.size(); ++i) {
    const float* raw = out->last(i, batch);
    std::copy(raw, raw + out->vocab, row.begin());
    tokens[i] = samplers[i]->Sample(row);
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::SetPrefillObserver(LinearObserver observer) {
  if (cpu_prefill_ == nullptr) {
    return absl::FailedPreconditionError(
        "observing linear-layer inputs (calibration) needs the CPU backend");
  }
  cpu_prefill_->set_observer(std::move(observer));
  return absl::OkStatus();
}

}  // namespace dq
