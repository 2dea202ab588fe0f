// What a worker serves: one model (tokenizer, config, chat template) and the weights of its
// phase bound to a ModelRunner. Both workers load the same way, so it lives here once.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/device_spec.h"
#include "common/status.h"
#include "dqserve/v1/worker.pb.h"
#include "engine/grammar/grammar_cache.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_runner.h"
#include "engine/quant/weight_codec.h"
#include "worker_common/device_backend.h"
#include "worker_common/kv_staging.h"

namespace dq::worker {

struct PhaseModelOptions {
  // A .gguf file or a HF checkpoint directory: tokenizer, config, and the weights unless
  // `weights` is given.
  std::string model;
  // This phase's own checkpoint (full disaggregation); empty: the model's weights.
  std::string weights;
  // "weight_only", "w8a8" (fp8) or "w4a4" (nvfp4).
  std::string compute = "weight_only";
  int threads = 0;             // 0: all hardware threads
  int kv_block_size = 16;      // tokens per KV block
  int kv_capacity_tokens = 0;  // KV pool size in tokens; 0: see below, else min(context, 8192)
  // With kv_capacity_tokens 0: this many model contexts (if > 0), at least min_kv_tokens. Lets a
  // caller size the pool from the model's context without loading the model first.
  int kv_capacity_contexts = 0;
  int min_kv_tokens = 0;
  // "cpu", "cuda" or "cuda:N" (common/device_spec.h). A GPU needs a CUDA build.
  std::string device = "cpu";
  // Device backends: most tokens in one forward pass (0: the backend's default), and whether
  // decode steps may be replayed as CUDA graphs (see DeviceBackendOptions).
  int max_batch_tokens = 0;
  bool device_graphs = true;
  // GPU decode steps independent of their batch-mates (DeviceBackendOptions::batch_invariant).
  bool batch_invariant = false;
  // Prefill attention in FP8 (DeviceBackendOptions::fp8_attention on a GPU, emulated on the
  // CPU: ModelRunnerOptions::cpu_prefill): for compute "w8a8"; LoadPhaseModel refuses it
  // otherwise.
  bool fp8_attention = false;
  // Kernel choices on a GPU (DeviceBackendOptions::cuda_kernels; empty: the defaults).
  std::string cuda_kernels;
  // The CPU backend's linears in decode steps (common/cpu_matmul.h): "q8" or "exact"
  // (ModelRunnerOptions::cpu_q8_decode); ignored on a GPU.
  std::string cpu_matmul = "q8";
  // The lm_head's format (PhaseWeights::lm_head): "bf16" keeps the checkpoint's; "int8",
  // "int4", ... quantize it at load (decode: at 2 bits the bf16 lm_head is 41 % of a step's bytes).
  std::string lm_head = "bf16";
  // Offloaded disaggregated prefill (a prefill worker sharing its GPU, docs/odp.md): with
  // odp.enabled, `odp_resident_weights` (the decode checkpoint) is held resident and prefills
  // short prompts, and `weights` is streamed per pass for long ones.
  OdpBackendOptions odp;
  std::string odp_resident_weights;
  // A hybrid model's per-sequence state slots (ModelRunnerOptions::state_slots; 0: 16): the
  // sequences the worker holds at once (decode: leases; prefill: running prompts).
  int state_slots = 0;
};

struct PhaseModel {
  std::unique_ptr<Model> model;         // tokenizer, chat template, config
  std::unique_ptr<Model> weights;       // set when the phase has its own checkpoint
  std::unique_ptr<Model> odp_resident;  // ODP: the resident (decode) weights
  ComputeMode mode = ComputeMode::kWeightOnly;
  std::string scheme;  // e.g. "Q4_1:weight_only", "nvfp4:w4a4", "bf16:weight_only"
  std::unique_ptr<ModelRunner> runner;
  DeviceSpec device;  // where the runner computes and keeps its KV cache
  // How the KV cache meets the transports (in place on the CPU, staged on a GPU). Declared
  // after the runner, so it goes first.
  std::unique_ptr<KvStaging> kv_staging;
  // Structured output: the request's JSON schemas compiled over this model's vocabulary.
  std::shared_ptr<grammar::GrammarCache> grammars;
  // A hybrid model's state slot as the lease manifest describes it (worker_common/
  // state_slot_layout.h); nullopt for a pure-attention model.
  std::optional<dqserve::v1::StateSlotLayout> state_slot;

  const Model& phase_weights() const { return weights ? *weights : *model; }
};

// FP8 attention (PhaseModelOptions::fp8_attention) goes with FP8 linears: an InvalidArgument
// naming the flags when it is asked for with another compute mode (or a bad device). Needs no
// weights, so a worker checks it before loading any.
absl::Status CheckFp8Attention(const PhaseModelOptions& options);

// Loads the model and this phase's weights and builds the runner on the device (both of its
// phases run the same weights in the same mode) and its KV staging. Errors name the path, or
// the device, and what is wrong; a bad device fails before any weight is read.
absl::StatusOr<std::unique_ptr<PhaseModel>> LoadPhaseModel(const PhaseModelOptions& options);

// A short name for how a checkpoint's linear weights are stored: the quantization scheme from
// its config ("nvfp4", "int4-g128"), else the dtype holding most of its bytes ("Q4_1", "bf16").
std::string StorageScheme(const Model& model);

}  // namespace dq::worker
