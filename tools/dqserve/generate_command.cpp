#include "tools/dqserve/generate_command.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include "common/cpu_matmul.h"
#include "common/lm_head_format.h"
#include "engine/generate/generator.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_runner.h"
#include "engine/quant/weight_codec.h"
#include "engine/spec/dflash_drafter.h"
#include "engine/spec/draft_model.h"
#include "engine/spec/self_drafter.h"
#include "engine/spec/spec_config.h"
#include "tools/dqserve/odp_flags.h"
#ifdef DQ_HAVE_CUDA
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/kernel_options.h"
#include "engine/model/odp_policy.h"
#endif

namespace dq::cli {
namespace {

struct GenerateOptions {
  std::string model;  // tokenizer, chat template, and the weights of any phase not given below
  std::string prefill_weights, decode_weights;
  std::string prefill_compute = "weight_only", decode_compute = "weight_only";
  std::string prompt;
  std::string system;
  bool raw = false;  // no chat template: the prompt is the model's input text
  bool interactive = false;
  bool no_think = false;
  int threads = 0;
  int kv_capacity = 0;  // tokens; 0: the runner's default, min(context, 8192)
  std::string device = "cpu";
  bool batch_invariant = false;  // cuda: cuda::CudaBackendOptions::batch_invariant
  // "fp8": CudaBackendOptions::fp8_attention on cuda, emulated on the CPU (DecoderModelOptions)
  std::string prefill_attention = "bf16";
  // cuda: CudaBackendOptions::kernels as text (engine/cuda/kernel_options.h); empty: defaults
  std::string cuda_kernels;
  // The lm_head's format in both phases (common/lm_head_format.h): "bf16" keeps the stored one.
  std::string lm_head = "bf16";
  std::string cpu_matmul = "q8";  // cpu: "q8" or "exact" (common/cpu_matmul.h)
  SamplingParams sampling;
  std::string speculative = "none";  // drafter name, or none
  SpecConfig spec;
  bool spec_fixed_k = false;
  DraftModelOptions draft;  // --speculative self: the drafter's weights (dflash: weights only)
  OdpFlags odp;
};

// Checks the speculation flags before any model is loaded (exit code 2 on a bad one).
absl::Status CheckSpecFlags(const GenerateOptions& o) {
  const bool draft_flags = !o.draft.format.empty() || !o.draft.weights.empty();
  if (draft_flags && o.speculative != "self" && o.speculative != "dflash") {
    return absl::InvalidArgumentError(
        "--draft-format and --draft-weights are for --speculative self (and --draft-weights for "
        "--speculative dflash)");
  }
  if (o.speculative == "none") return absl::OkStatus();
  if (o.speculative != "ngram" && o.speculative != "self" && o.speculative != "dflash") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--speculative must be none, ngram, self or dflash, got '", o.speculative, "'"));
  }
  if (o.speculative == "dflash" && (o.draft.weights.empty() || !o.draft.format.empty())) {
    return absl::InvalidArgumentError(
        "--speculative dflash needs --draft-weights DIR (a DFlash drafter checkpoint made for "
        "this model) and no --draft-format");
  }
  if (o.speculative == "self" && o.draft.format.empty() == o.draft.weights.empty()) {
    return absl::InvalidArgumentError(
        "--speculative self needs exactly one of --draft-format FORMAT (quantize the model's "
        "weights at load, e.g. int2 or lut2) and --draft-weights PATH");
  }
  return Validate(o.spec);
}

// --prefill-attention before any model is loaded (exit code 2 on a bad one): FP8 attention goes
// with FP8 linears (on the CPU it is emulated).
absl::Status CheckAttentionFlags(const GenerateOptions& o) {
  if (o.prefill_attention != "bf16" && o.prefill_attention != "fp8") {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefill-attention must be bf16 or fp8, got '", o.prefill_attention, "'"));
  }
  if (o.prefill_attention == "fp8" && o.prefill_compute != "w8a8") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--prefill-attention fp8 is only for --prefill-compute w8a8 (FP8 attention goes with FP8 "
        "linears), got --device ",
        o.device, " --prefill-compute ", o.prefill_compute,
        "; use --prefill-attention bf16 (the default)"));
  }
  return absl::OkStatus();
}

// --cuda-kernels: for --device cuda, and a valid value (exit code 2 before any weight is read).
absl::Status CheckCudaKernelsFlag(const GenerateOptions& o) {
  if (o.cuda_kernels.empty()) return absl::OkStatus();
  if (o.device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--cuda-kernels is for --device cuda, got --device ", o.device));
  }
#ifdef DQ_HAVE_CUDA
  const absl::Status s = cuda::ParseKernelOptions(o.cuda_kernels).status();
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("--cuda-kernels: ", s.message()));
#endif
  return absl::OkStatus();
}

// Whether the runner's prefill passes (with --odp: the streamed ones) run attention in FP8
// (emulated on the CPU).
bool PrefillUsesFp8Attention(const ModelRunner& runner) {
  if (runner.CpuPrefillUsesFp8Attention()) return true;
#ifdef DQ_HAVE_CUDA
  const ForwardModel* m = &runner.forward_model(Phase::kPrefill);
  if (const auto* odp = dynamic_cast<const OdpForwardModel*>(m)) m = &odp->streamed();
  const auto* cm = dynamic_cast<const cuda::CudaDecoderModel*>(m);
  return cm != nullptr && cm->stats().fp8_attention;
#else
  return false;
#endif
}

// A chat session: the conversation so far, rendered through the model's template each turn.
class ChatSession {
 public:
  ChatSession(const GenerateOptions& o, Model& model, ModelRunner& runner, Drafter* drafter)
      : o_(o), model_(model), runner_(runner), drafter_(drafter) {
    if (!o.system.empty()) history_.push_back({"system", o.system});
  }

  // Streams one answer to stdout; returns its text.
  absl::StatusOr<std::string> Turn(const std::string& user) {
    DQ_ASSIGN_OR_RETURN(std::vector<int32_t> ids, PromptIds(user));
    GeneratorOptions go;
    go.drafter = drafter_;
    go.spec = o_.spec;
    go.spec.adaptive = !o_.spec_fixed_k;
    Generator gen(runner_, model_.tokenizer, model_.config.eos_token_ids, go);
    GenerationRequest req{std::move(ids), o_.sampling};
    auto on_text = [](size_t, std::string_view t) {
      std::fwrite(t.data(), 1, t.size(), stdout);
      std::fflush(stdout);
    };
    DQ_ASSIGN_OR_RETURN(auto results, gen.Generate(std::span(&req, 1), on_text));
    const GenerationResult& r = results[0];
    std::printf("\n");
    std::fflush(stdout);
    const double tps = r.decode_seconds > 0 ? (r.tokens.size() - 1) / r.decode_seconds : 0;
    std::fprintf(stderr,
                 "[%d prompt tokens in %.3f s (%.1f tok/s); %zu generated, decode %.1f tok/s; "
                 "finish: %s]\n",
                 r.prompt_tokens, r.prefill_seconds, r.prompt_tokens / r.prefill_seconds,
                 r.tokens.size(), tps, std::string(FinishReasonName(r.finish_reason)).c_str());
    if (drafter_ != nullptr) {
      std::fprintf(stderr,
                   "[speculative %s: %lld steps, %lld drafted, %lld accepted (rate %.2f), "
                   "acceptance length %.2f tokens/step]\n",
                   std::string(drafter_->name()).c_str(), static_cast<long long>(r.spec.steps),
                   static_cast<long long>(r.spec.drafted), static_cast<long long>(r.spec.accepted),
                   r.spec.acceptance_rate(), r.spec.acceptance_length());
    }
    history_.push_back({"user", user});
    history_.push_back({"assistant", r.text});
    return r.text;
  }

 private:
  absl::StatusOr<std::vector<int32_t>> PromptIds(const std::string& user) {
    if (o_.raw) return model_.tokenizer.Encode(user, /*parse_special=*/false);
    if (!model_.chat_template) {
      return absl::FailedPreconditionError(
          "this model has no chat template; pass --raw to give the prompt as plain text");
    }
    std::vector<ChatMessage> msgs = history_;
    msgs.push_back({"user", user});
    ChatRenderOptions ro;
    if (o_.no_think) ro.enable_thinking = false;
    DQ_ASSIGN_OR_RETURN(RenderedChat chat, model_.chat_template->Render(msgs, ro));
    // As the router does: special tokens only in the template's own text.
    return model_.tokenizer.EncodeSpecialOutside(chat.text, chat.content);
  }

  const GenerateOptions& o_;
  Model& model_;
  ModelRunner& runner_;
  Drafter* drafter_;
  std::vector<ChatMessage> history_;
};

// The self drafter over `base` quantized to --draft-format, or over --draft-weights; its weights
// go to *draft_model. Runs on the target's backend, with a KV pool of the same capacity.
absl::StatusOr<std::unique_ptr<Drafter>> MakeSelfDrafter(const GenerateOptions& o,
                                                         const Model& base,
                                                         const ModelRunnerOptions& target,
                                                         std::unique_ptr<Model>* draft_model) {
  const auto t0 = std::chrono::steady_clock::now();
  DraftModelOptions dmo = o.draft;
  dmo.threads = o.threads;
  DQ_ASSIGN_OR_RETURN(*draft_model, LoadDraftModel(base, dmo));
  SelfDrafterOptions so;
  so.threads = target.threads;
  so.backend = target.backend;
  DQ_ASSIGN_OR_RETURN(std::unique_ptr<SelfDrafter> drafter,
                      SelfDrafter::Create(*(*draft_model)->checkpoint, (*draft_model)->config, so));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(
      stderr, "[self drafter: %s, ready in %.1f s]\n",
      (o.draft.weights.empty() ? base.path + " as " + o.draft.format : o.draft.weights).c_str(),
      seconds);
  return std::unique_ptr<Drafter>(std::move(drafter));
}

// The DFlash drafter of --draft-weights over the decode phase's model (whose hidden states,
// embeddings and lm_head it reads); its checkpoint goes to *checkpoint.
absl::StatusOr<std::unique_ptr<Drafter>> MakeDFlashDrafter(
    const GenerateOptions& o, const Model& target, std::unique_ptr<Checkpoint>* checkpoint) {
  DFlashDrafterOptions opts;
  opts.threads = o.threads;
  opts.kv_capacity = o.kv_capacity;
  DQ_ASSIGN_OR_RETURN(
      std::unique_ptr<DFlashDrafter> drafter,
      DFlashDrafter::Load(o.draft.weights, *target.checkpoint, target.config, opts, checkpoint));
  std::fprintf(stderr, "[dflash drafter: %s, %d layers, block %d]\n", o.draft.weights.c_str(),
               drafter->config().layers.num_layers, drafter->config().block_size);
  return std::unique_ptr<Drafter>(std::move(drafter));
}

absl::Status RunGenerate(const GenerateOptions& o) {
  if (!o.interactive && o.prompt.empty()) {
    return absl::InvalidArgumentError("give --prompt TEXT, or --interactive for a chat");
  }
  const std::string base = !o.model.empty() ? o.model : o.decode_weights;
  if (base.empty()) return absl::InvalidArgumentError("give --model (or --decode-weights)");
  DQ_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(base));
  // Each phase's weights: its own checkpoint (full disaggregation) or the base model's, in
  // that phase's compute mode (format disaggregation when only the modes differ).
  std::unique_ptr<Model> prefill_model, decode_model;
  if (!o.prefill_weights.empty() && o.prefill_weights != base) {
    DQ_ASSIGN_OR_RETURN(prefill_model, LoadModel(o.prefill_weights));
  }
  if (!o.decode_weights.empty() && o.decode_weights != base) {
    DQ_ASSIGN_OR_RETURN(decode_model, LoadModel(o.decode_weights));
  }
  const Model& pm = prefill_model ? *prefill_model : *model;
  const Model& dm = decode_model ? *decode_model : *model;
  for (const Model* m : {&pm, &dm}) {
    if (m->tokenizer.vocab_size() != model->tokenizer.vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          m->path, " has a different tokenizer (", m->tokenizer.vocab_size(), " tokens vs ",
          model->tokenizer.vocab_size(), "); both phases must share the tokenizer"));
    }
  }
  DQ_ASSIGN_OR_RETURN(ComputeMode prefill_mode, ParseComputeMode(o.prefill_compute));
  DQ_ASSIGN_OR_RETURN(ComputeMode decode_mode, ParseComputeMode(o.decode_compute));
  ModelRunnerOptions ro;
  ro.threads = o.threads;
  ro.kv_capacity = o.kv_capacity;
  if (o.odp.enabled) {
    if (o.device != "cuda" || !prefill_model) {
      return absl::InvalidArgumentError(
          "--odp streams --prefill-weights (a checkpoint of its own) on --device cuda");
    }
    OdpFlags odp = o.odp;
    odp.fp8_attention = o.prefill_attention == "fp8";
    odp.batch_invariant = o.batch_invariant;
    odp.cuda_kernels = o.cuda_kernels;
    DQ_ASSIGN_OR_RETURN(ro.backend,
                        OdpBackend(odp, pm.config, dm.config, pm.tokenizer, dm.tokenizer));
  } else if (o.device == "cuda") {
#ifdef DQ_HAVE_CUDA
    cuda::CudaBackendOptions co;
    co.batch_invariant = o.batch_invariant;
    co.fp8_attention = o.prefill_attention == "fp8";
    co.kernels = cuda::ParseKernelOptions(o.cuda_kernels).value();  // CheckCudaKernelsFlag
    ro.backend = cuda::CudaBackendFactory(co);
#else
    return absl::InvalidArgumentError(
        "this dqserve was built without CUDA; build with the release-cuda preset for --device "
        "cuda");
#endif
  } else if (o.device != "cpu") {
    return absl::InvalidArgumentError("--device must be cpu or cuda");
  } else {
    ro.cpu_prefill.fp8_prefill_attention = o.prefill_attention == "fp8";
    DQ_ASSIGN_OR_RETURN(const CpuMatmul cpu_matmul, ParseCpuMatmul(o.cpu_matmul));
    ro.cpu_q8_decode = cpu_matmul == CpuMatmul::kQ8;
  }
  DQ_ASSIGN_OR_RETURN(
      auto runner, ModelRunner::Create(
                       PhaseWeights{pm.checkpoint.get(), &pm.config, prefill_mode, o.lm_head},
                       PhaseWeights{dm.checkpoint.get(), &dm.config, decode_mode, o.lm_head}, ro));
  if (o.prefill_attention == "fp8" && !PrefillUsesFp8Attention(*runner)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--prefill-attention fp8: ", pm.path, " (head_dim ", pm.config.head_dim, ", ",
        pm.config.num_kv_heads,
        " KV heads) cannot run FP8 prefill attention: it needs every layer linear in FP8 W8A8 "
        "and, on a GPU, head_dim 128 and 1, 2, 4, 8 or 16 KV heads; use --prefill-attention "
        "bf16"));
  }
  if (!KeepsStoredLmHead(o.lm_head)) {
    std::fprintf(stderr, "[lm_head: %s, quantized at load]\n", o.lm_head.c_str());
  }
  if (o.prefill_attention == "fp8") {
    std::fprintf(stderr, "[prefill attention: FP8 (e4m3 Q/K/V/P)%s]\n",
                 o.device == "cpu" ? ", emulated on the CPU" : "");
  }
  std::unique_ptr<Model> draft_model;            // the self drafter's weights; outlives the drafter
  std::unique_ptr<Checkpoint> draft_checkpoint;  // the dflash drafter's
  std::unique_ptr<Drafter> drafter;
  if (o.speculative == "self") {
    DQ_ASSIGN_OR_RETURN(drafter, MakeSelfDrafter(o, *model, ro, &draft_model));
  } else if (o.speculative == "dflash") {
    DQ_ASSIGN_OR_RETURN(drafter, MakeDFlashDrafter(o, dm, &draft_checkpoint));
  } else if (o.speculative != "none") {
    DQ_ASSIGN_OR_RETURN(drafter, CreateDrafter(o.speculative, dm.config));
  }
  if (drafter != nullptr && o.spec.k > drafter->max_draft_tokens()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--spec-k ", o.spec.k, " is more than the ", std::string(drafter->name()),
                     " drafter drafts in one step (", drafter->max_draft_tokens(),
                     "); use --spec-k ", drafter->max_draft_tokens(), " or less"));
  }
  ChatSession chat(o, *model, *runner, drafter.get());
  if (!o.interactive) return chat.Turn(o.prompt).status();
  std::fprintf(stderr, "dqserve: chatting with %s (%s); empty line or Ctrl-D to quit\n",
               o.model.c_str(), model->config.architecture.c_str());
  std::string line;
  while (std::fprintf(stderr, "> "), std::getline(std::cin, line) && !line.empty()) {
    absl::Status s = chat.Turn(line).status();
    if (!s.ok()) std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterGenerate(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<GenerateOptions>();
  o->sampling.temperature = 0.0f;
  o->sampling.max_tokens = 256;
  CLI::App* cmd = app.add_subcommand("generate", "answer a prompt with a local model (CPU)");
  cmd->add_option("--model", o->model, "a .gguf file or a HF checkpoint directory");
  cmd->add_option("--prefill-weights", o->prefill_weights, "checkpoint for the prefill phase");
  cmd->add_option("--prefill-compute", o->prefill_compute, "weight_only, w8a8 (fp8), w4a4 (nvfp4)");
  cmd->add_option("--decode-weights", o->decode_weights, "checkpoint for the decode phase");
  cmd->add_option("--decode-compute", o->decode_compute, "weight_only (default)");
  cmd->add_option("--prompt", o->prompt, "the user message");
  cmd->add_option("--system", o->system, "a system message");
  cmd->add_flag("--raw", o->raw, "no chat template: the prompt is the raw model input");
  cmd->add_flag("--interactive,-i", o->interactive, "chat: read user turns from stdin");
  cmd->add_flag("--no-think", o->no_think, "Qwen3: disable thinking (empty think block)");
  cmd->add_option("--max-tokens", o->sampling.max_tokens, "tokens to generate at most");
  cmd->add_option("--temperature", o->sampling.temperature, "0 = greedy");
  cmd->add_option("--top-p", o->sampling.top_p, "nucleus sampling mass");
  cmd->add_option("--top-k", o->sampling.top_k, "keep the k most likely tokens (0 = all)");
  cmd->add_option("--min-p", o->sampling.min_p, "drop tokens below min_p * max probability");
  cmd->add_option("--seed", o->sampling.seed, "random seed for sampling");
  cmd->add_option("--stop", o->sampling.stop, "stop string (repeatable)");
  cmd->add_option("--threads", o->threads, "CPU threads (default: all)");
  cmd->add_option("--device", o->device, "cpu (default) or cuda");
  cmd->add_flag("--batch-invariant", o->batch_invariant,
                "cuda: decode steps independent of their batch-mates (see docs/speculative.md)");
  cmd->add_option("--prefill-attention", o->prefill_attention,
                  "--prefill-compute w8a8: bf16 (default) or fp8 prefill attention (emulated on "
                  "the CPU; with --odp: the streamed model's; changes numerics slightly, "
                  "docs/serving.md)");
  cmd->add_option("--cuda-kernels", o->cuda_kernels,
                  "cuda: kernel choices as key=value pairs, e.g. prefill_attention=wg128pp "
                  "(engine/cuda/kernel_options.h; docs/serving.md)");
  cmd->add_option("--lm-head", o->lm_head,
                  "the lm_head's format: bf16 (the checkpoint's own, default) or int8, int4, "
                  "int3, int2, nvfp4 (quantized at load; docs/fidelity.md)")
      ->check(
          CLI::IsMember(std::vector<std::string>(kLmHeadFormats.begin(), kLmHeadFormats.end())));
  cmd->add_option("--cpu-matmul", o->cpu_matmul, kCpuMatmulHelp)
      ->check(
          CLI::IsMember(std::vector<std::string>(kCpuMatmulModes.begin(), kCpuMatmulModes.end())))
      ->capture_default_str();
  cmd->add_option("--kv-capacity", o->kv_capacity,
                  "KV cache tokens (default min(context, 8192); a prompt plus its answer must fit)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--speculative", o->speculative,
                  "drafter: none (default), ngram, self or dflash");
  cmd->add_option("--draft-format", o->draft.format,
                  "self drafter: quantize --model's weights to this at load (int2, lut2, ...)");
  cmd->add_option("--draft-weights,--draft-model", o->draft.weights,
                  "self drafter: a checkpoint of its own (same tokenizer as the model); "
                  "dflash: the DFlash drafter's checkpoint directory");
  cmd->add_option("--draft-group-size", o->draft.group_size,
                  "self drafter with --draft-format intN: group size 32, 64 or 128");
  cmd->add_option("--spec-k", o->spec.k, "tokens drafted per step (at most, when adaptive), 1..16");
  cmd->add_flag("--spec-fixed-k", o->spec_fixed_k, "always draft --spec-k tokens (no adaptation)");
  AddOdpFlags(cmd, &o->odp);
  cmd->callback([o, exit_code] {
    absl::Status bad = CheckSpecFlags(*o);
    if (bad.ok()) bad = CheckAttentionFlags(*o);
    if (bad.ok()) bad = CheckCudaKernelsFlag(*o);
    if (!bad.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(bad.message()).c_str());
      *exit_code = 2;
      return;
    }
    const absl::Status s = RunGenerate(*o);
    if (!s.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace dq::cli
