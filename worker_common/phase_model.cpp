#include "worker_common/phase_model.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/cpu_matmul.h"
#include "engine/model/odp_policy.h"
#include "engine/quant/requantize.h"
#include "worker_common/device_backend.h"
#include "worker_common/state_slot_layout.h"

namespace dq::worker {

std::string StorageScheme(const Model& model) {
  const QuantConfig& q = model.config.quant;
  if (q.quantized()) {
    return q.group_size > 0 ? absl::StrCat(q.scheme, "-g", q.group_size) : q.scheme;
  }
  std::map<std::string, int64_t> bytes;
  for (const TensorView& t : model.checkpoint->tensors()) {
    if (t.shape.size() == 2) bytes[DTypeName(t.dtype)] += t.nbytes;
  }
  std::string best = "unknown";
  int64_t most = -1;
  for (const auto& [name, n] : bytes) {
    if (n > most) best = name, most = n;
  }
  return best;
}

// ODP's resident weights, checked against the streamed ones before anything is uploaded.
absl::StatusOr<std::unique_ptr<Model>> LoadOdpResident(const PhaseModelOptions& o,
                                                       const PhaseModel& pm) {
  if (!pm.device.cuda || !pm.weights || o.odp_resident_weights.empty()) {
    return absl::InvalidArgumentError(
        "ODP needs --device cuda[:N], --weights (the streamed prefill checkpoint) and "
        "--odp-resident-weights (the decode checkpoint kept on the GPU)");
  }
  DQ_ASSIGN_OR_RETURN(std::unique_ptr<Model> r, LoadModel(o.odp_resident_weights));
  DQ_RETURN_IF_ERROR(CheckOdpConfigs(pm.weights->config, r->config));
  DQ_RETURN_IF_ERROR(CheckOdpTokenizers(pm.weights->tokenizer, r->tokenizer));
  return r;
}

absl::Status CheckFp8Attention(const PhaseModelOptions& o) {
  if (!o.fp8_attention) return absl::OkStatus();
  DQ_RETURN_IF_ERROR(ParseDeviceSpec(o.device).status());
  if (o.compute == "w8a8") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--attention fp8 is only for --compute w8a8 (FP8 attention goes with FP8 linears; on the "
      "CPU it is emulated), got --compute ",
      o.compute, " --device ", o.device, "; use --attention bf16 (the default)"));
}

absl::StatusOr<std::unique_ptr<PhaseModel>> LoadPhaseModel(const PhaseModelOptions& o) {
  if (o.model.empty()) return absl::InvalidArgumentError("give --model (a .gguf file or HF dir)");
  DQ_RETURN_IF_ERROR(CheckFp8Attention(o));
  DQ_RETURN_IF_ERROR(CheckLmHeadFormat(o.lm_head));
  DQ_ASSIGN_OR_RETURN(const CpuMatmul cpu_matmul, ParseCpuMatmul(o.cpu_matmul));
  auto pm = std::make_unique<PhaseModel>();
  DQ_ASSIGN_OR_RETURN(pm->device, ParseDeviceSpec(o.device));
  DQ_ASSIGN_OR_RETURN(
      BackendFactory backend,
      BackendForDevice(pm->device,
                       DeviceBackendOptions{o.max_batch_tokens, o.device_graphs, o.odp,
                                            o.batch_invariant, o.fp8_attention, o.cuda_kernels}));
  DQ_ASSIGN_OR_RETURN(pm->model, LoadModel(o.model));
  if (!o.weights.empty() && o.weights != o.model) {
    DQ_ASSIGN_OR_RETURN(pm->weights, LoadModel(o.weights));
    if (pm->weights->tokenizer.vocab_size() != pm->model->tokenizer.vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          o.weights, " has a different tokenizer (", pm->weights->tokenizer.vocab_size(),
          " tokens vs ", pm->model->tokenizer.vocab_size(), " in ", o.model,
          "); a phase's weights must share the model's tokenizer"));
    }
  }
  DQ_ASSIGN_OR_RETURN(pm->mode, ParseComputeMode(o.compute));
  const Model& w = pm->phase_weights();
  pm->scheme = absl::StrCat(StorageScheme(w), ":", ComputeModeName(pm->mode));
  ModelRunnerOptions ro;
  ro.threads = o.threads;
  ro.kv_block_size = o.kv_block_size;
  ro.kv_capacity = o.kv_capacity_tokens;
  ro.state_slots = o.state_slots;
  ro.backend = std::move(backend);
  // The CPU emulates FP8 attention (a device backend got the option through BackendForDevice).
  ro.cpu_prefill.fp8_prefill_attention = o.fp8_attention && !pm->device.cuda;
  ro.cpu_q8_decode = cpu_matmul == CpuMatmul::kQ8 && !pm->device.cuda;
  if (ro.kv_capacity == 0 && o.kv_capacity_contexts > 0) {
    ro.kv_capacity = std::max(o.kv_capacity_contexts * w.config.max_context, o.min_kv_tokens);
  }
  const PhaseWeights phase{w.checkpoint.get(), &w.config, pm->mode, o.lm_head};
  if (o.odp.enabled) {
    // The streamed prefill checkpoint is the prefill phase; the resident one decodes (and
    // prefills short prompts).
    DQ_ASSIGN_OR_RETURN(pm->odp_resident, LoadOdpResident(o, *pm));
    const Model& r = *pm->odp_resident;
    const PhaseWeights resident{r.checkpoint.get(), &r.config, ComputeMode::kWeightOnly, o.lm_head};
    DQ_ASSIGN_OR_RETURN(pm->runner, ModelRunner::Create(phase, resident, ro));
  } else {
    DQ_ASSIGN_OR_RETURN(pm->runner, ModelRunner::Create(phase, phase, ro));
  }
  if (o.fp8_attention && !PrefillUsesFp8Attention(*pm->runner)) {
    // Asked for and not taken: the operator would measure the wrong kernel. (The CPU refuses
    // weights that cannot take it in ModelRunner::Create.)
    return absl::InvalidArgumentError(absl::StrCat(
        "--attention fp8: ", o.weights.empty() ? o.model : o.weights, " (", pm->scheme,
        ", head_dim ", w.config.head_dim, ", ", w.config.num_kv_heads,
        " KV heads) cannot run FP8 prefill attention on ", pm->device.name(),
        ": it needs every layer linear in FP8 W8A8, and on a GPU head_dim 128 and 1, 2, 4, 8 or "
        "16 KV heads; use --attention bf16"));
  }
  // A hybrid model's recurrent state travels as the lease's state slot part, laid out as the
  // program declares it.
  DQ_ASSIGN_OR_RETURN(pm->state_slot, StateSlotLayoutFor(pm->runner->config().architecture,
                                                         pm->runner->sequence_state()));
  DQ_ASSIGN_OR_RETURN(pm->kv_staging, CreateKvStaging(*pm->runner, pm->device));
  pm->grammars = std::make_shared<grammar::GrammarCache>(grammar::TokenVocabulary::FromTokenizer(
      pm->model->tokenizer, pm->runner->config().vocab_size, pm->model->config.eos_token_ids));
  return pm;
}

}  // namespace dq::worker
