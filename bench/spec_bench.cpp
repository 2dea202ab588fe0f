// dq-bench-spec: speculative decoding on the CPU or a CUDA GPU (--device), as JSON. Runs the same
// chat prompts through the Generator without a drafter ("plain"), with the n-gram drafter and with
// self-drafters, at batch 1 and 4; reports decode tok/s (best of --reps), speedup over plain in the
// same target format, acceptance, and whether the tokens equal plain decoding's (they must:
// greedy). Also times single forward passes (the target fed 1..k+1 tokens, each drafter fed 1), the
// costs that decide whether a drafter can pay off.
//   dq-bench-spec --target DIR|GGUF [--draft-base DIR|GGUF] --arm plain --arm ngram
//                 --arm self:int2:64 [--arm weights:PATH] [--batch 1 --batch 4] [--k 4]
//                 [--device cuda]
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/generate/generator.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_runner.h"
#include "engine/spec/draft_model.h"
#include "engine/spec/ngram_drafter.h"
#include "engine/spec/self_drafter.h"
#ifdef DQ_HAVE_CUDA
#include "engine/cuda/cuda_model.h"
#endif

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// Chat prompts of the kinds an assistant answers: code, copying, lists, explanation.
const char* const kPrompts[] = {
    "Write a Python function that checks whether a number is prime, with a docstring.",
    "Repeat the following list exactly: apples, oranges, bananas, grapes, pears, plums, "
    "cherries, peaches.",
    "Summarize in two sentences: The Eiffel Tower is a wrought-iron lattice tower on the Champ "
    "de Mars in Paris, France. It is named after the engineer Gustave Eiffel, whose company "
    "designed and built the tower from 1887 to 1889.",
    "List the days of the week, one per line, each followed by its number.",
    "Explain what a hash table is to a beginner.",
    "Rewrite in the passive voice: The cat chased the mouse across the kitchen floor.",
    "What is the capital of France? Answer, then give three facts about it.",
    "Translate to French: Good morning, how are you today? I am going to the market.",
};

struct Options {
  std::string target, draft_base, machine, commit, command;
  std::string device = "cpu";
  bool batch_invariant = false;  // CUDA: CudaBackendOptions::batch_invariant
  std::vector<std::string> arms = {"plain", "ngram"};
  std::vector<int> batches = {1};
  int gen_tokens = 96;
  int k = 4;
  int threads = 2;
  int reps = 2;
  int prompts = 8;
};

struct Arm {
  std::string name;
  std::unique_ptr<dq::Model> weights;  // self drafters only
  std::unique_ptr<dq::Drafter> drafter;
};

// The backend every runner of the bench uses (target and drafters alike).
absl::StatusOr<dq::BackendFactory> BackendFor(const std::string& device, bool batch_invariant) {
  if (device == "cpu") return dq::BackendFactory{};
#ifdef DQ_HAVE_CUDA
  if (device == "cuda") {
    dq::cuda::CudaBackendOptions co;
    co.batch_invariant = batch_invariant;
    return dq::cuda::CudaBackendFactory(co);
  }
#endif
  return absl::InvalidArgumentError(
      absl::StrCat("--device ", device, ": this build has ",
                   device == "cuda" ? "no CUDA (build the release-cuda preset)" : "cpu or cuda"));
}

absl::StatusOr<Arm> MakeArm(const std::string& spec, const dq::Model& base, int threads,
                            const dq::BackendFactory& backend) {
  Arm arm{spec, nullptr, nullptr};
  if (spec == "plain") return arm;
  if (spec == "ngram") {
    arm.drafter = std::make_unique<dq::NgramDrafter>();
    return arm;
  }
  dq::DraftModelOptions dmo;
  dmo.threads = threads;
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon), rest = spec.substr(colon + 1);
  if (colon == std::string::npos || (kind != "self" && kind != "weights")) {
    return absl::InvalidArgumentError("--arm: plain, ngram, self:FORMAT[:GROUP] or weights:PATH");
  }
  if (kind == "weights") {
    dmo.weights = rest;
  } else {
    const auto c2 = rest.find(':');
    dmo.format = rest.substr(0, c2);
    if (c2 != std::string::npos) dmo.group_size = std::stoi(rest.substr(c2 + 1));
  }
  DQ_ASSIGN_OR_RETURN(arm.weights, dq::LoadDraftModel(base, dmo));
  dq::SelfDrafterOptions so;
  so.threads = threads;
  so.backend = backend;
  DQ_ASSIGN_OR_RETURN(arm.drafter,
                      dq::SelfDrafter::Create(*arm.weights->checkpoint, arm.weights->config, so));
  return arm;
}

// Seconds per forward pass of `runner` feeding `n` tokens after a 64-token context (the best
// of a few, as the other CPU benches report).
absl::StatusOr<double> ForwardSeconds(dq::ModelRunner& runner, int n, bool all_logits) {
  dq::KvBlockPool& pool = runner.kv_pool();
  dq::KvSequence seq;
  std::vector<int32_t> context(64, 1000), fed(n, 1001);
  pool.extend(seq, 64);
  dq::BatchLogits logits;
  DQ_RETURN_IF_ERROR(
      runner.Forward(dq::Batch{dq::Phase::kPrefill, {{&seq, context, false}}}, &logits));
  double best = 1e30;
  for (int r = 0; r < 12; ++r) {
    pool.extend(seq, 64 + n);
    const auto t0 = Clock::now();
    DQ_RETURN_IF_ERROR(
        runner.Forward(dq::Batch{dq::Phase::kDecode, {{&seq, fed, all_logits}}}, &logits));
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    pool.truncate(seq, 64);
  }
  pool.release(seq);
  return best;
}

struct Tally {
  double seconds = 0;  // decode wall time, summed over the request groups
  int64_t tokens = 0;  // tokens decoded (the first of each request comes from prefill)
  dq::SpecStats spec;
  std::vector<std::vector<int32_t>> outputs;
};

absl::StatusOr<Tally> RunArm(dq::ModelRunner& runner, const dq::Model& model, dq::Drafter* d,
                             const std::vector<dq::GenerationRequest>& reqs, int batch, int k) {
  dq::GeneratorOptions go;
  go.drafter = d;
  go.spec.k = k;
  dq::Generator gen(runner, model.tokenizer, model.config.eos_token_ids, go);
  Tally t;
  for (size_t i = 0; i < reqs.size(); i += batch) {
    const size_t n = std::min(reqs.size() - i, static_cast<size_t>(batch));
    DQ_ASSIGN_OR_RETURN(auto results, gen.Generate(std::span(reqs).subspan(i, n)));
    double group = 0;  // the group decodes together: its time is its slowest request's
    for (const dq::GenerationResult& r : results) {
      group = std::max(group, r.decode_seconds);
      t.tokens += static_cast<int64_t>(r.tokens.size()) - 1;
      t.spec.steps += r.spec.steps;
      t.spec.drafted += r.spec.drafted;
      t.spec.accepted += r.spec.accepted;
      t.spec.emitted += r.spec.emitted;
      t.outputs.push_back(r.tokens);
    }
    t.seconds += group;
  }
  return t;
}

absl::StatusOr<std::vector<dq::GenerationRequest>> Requests(const dq::Model& m, const Options& o) {
  if (!m.chat_template) return absl::FailedPreconditionError("the target has no chat template");
  std::vector<dq::GenerationRequest> reqs;
  for (int i = 0; i < o.prompts && i < static_cast<int>(std::size(kPrompts)); ++i) {
    const std::vector<dq::ChatMessage> msgs = {{"user", kPrompts[i]}};
    DQ_ASSIGN_OR_RETURN(dq::RenderedChat chat, m.chat_template->Render(msgs, {}));
    const std::string& text = chat.text;
    dq::GenerationRequest r;
    r.prompt = m.tokenizer.Encode(text, /*parse_special=*/true);
    r.params.temperature = 0;
    r.params.max_tokens = o.gen_tokens;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

absl::StatusOr<json> Costs(dq::ModelRunner& target, std::vector<Arm>& arms, int k,
                           const dq::BackendFactory& backend) {
  json c = {{"target_forward_ms", json::object()}, {"drafter_forward_ms", json::object()}};
  for (int n : {1, 2, 3, 5, k + 1, 9}) {
    DQ_ASSIGN_OR_RETURN(double s, ForwardSeconds(target, n, /*all_logits=*/n > 1));
    c["target_forward_ms"][std::to_string(n)] = 1e3 * s;
  }
  for (Arm& a : arms) {
    auto* self = dynamic_cast<dq::SelfDrafter*>(a.drafter.get());
    if (self == nullptr) continue;
    // A drafter runner with the bench's thread count; its own pool, nothing else running.
    dq::ModelRunnerOptions ro;
    ro.threads = target.threads().num_threads();
    ro.backend = backend;
    DQ_ASSIGN_OR_RETURN(auto r,
                        dq::ModelRunner::Create(*a.weights->checkpoint, a.weights->config, ro));
    DQ_ASSIGN_OR_RETURN(double s, ForwardSeconds(*r, 1, false));
    c["drafter_forward_ms"][a.name] = 1e3 * s;
  }
  return c;
}

absl::Status Run(const Options& o) {
  DQ_ASSIGN_OR_RETURN(auto target, dq::LoadModel(o.target));
  std::unique_ptr<dq::Model> base_holder;
  const dq::Model* base = target.get();
  if (!o.draft_base.empty()) {
    DQ_ASSIGN_OR_RETURN(base_holder, dq::LoadModel(o.draft_base));
    base = base_holder.get();
  }
  DQ_ASSIGN_OR_RETURN(dq::BackendFactory backend, BackendFor(o.device, o.batch_invariant));
  dq::ModelRunnerOptions ro;
  ro.threads = o.threads;
  ro.backend = backend;
  DQ_ASSIGN_OR_RETURN(auto runner,
                      dq::ModelRunner::Create(*target->checkpoint, target->config, ro));
  std::vector<Arm> arms;
  for (const std::string& spec : o.arms) {
    DQ_ASSIGN_OR_RETURN(Arm a, MakeArm(spec, *base, o.threads, backend));
    arms.push_back(std::move(a));
  }
  DQ_ASSIGN_OR_RETURN(auto reqs, Requests(*target, o));
  json results = json::array();
  for (int batch : o.batches) {
    std::map<std::string, Tally> best;
    for (int rep = 0; rep < o.reps; ++rep) {
      for (Arm& a : arms) {  // arms interleaved, so drift in machine load hits them alike
        DQ_ASSIGN_OR_RETURN(Tally t, RunArm(*runner, *target, a.drafter.get(), reqs, batch, o.k));
        std::cerr << "batch " << batch << " rep " << rep << " " << a.name << ": "
                  << t.tokens / t.seconds << " tok/s\n";
        auto it = best.find(a.name);
        if (it == best.end() || t.seconds < it->second.seconds) best[a.name] = std::move(t);
      }
    }
    const Tally& plain = best.count("plain") ? best["plain"] : best.begin()->second;
    for (Arm& a : arms) {
      const Tally& t = best[a.name];
      results.push_back({{"arm", a.name},
                         {"batch", batch},
                         {"decode_tokens", t.tokens},
                         {"decode_seconds", t.seconds},
                         {"decode_tok_per_s", t.tokens / t.seconds},
                         {"speedup_vs_plain", plain.seconds / t.seconds},
                         {"identical_to_plain", t.outputs == plain.outputs},
                         {"steps", t.spec.steps},
                         {"drafted", t.spec.drafted},
                         {"accepted", t.spec.accepted},
                         {"acceptance_rate", t.spec.acceptance_rate()},
                         {"acceptance_length", t.spec.acceptance_length()}});
    }
  }
  DQ_ASSIGN_OR_RETURN(json costs, Costs(*runner, arms, o.k, backend));
  json j = {{"machine", o.machine},
            {"commit", o.commit},
            {"command", o.command},
            {"device", std::string(runner->backend())},
            {"batch_invariant", o.batch_invariant},
            {"target", o.target},
            {"draft_base", base->path},
            {"threads", runner->threads().num_threads()},
            {"k", o.k},
            {"adaptive_k", true},
            {"max_tokens", o.gen_tokens},
            {"prompts", reqs.size()},
            {"reps", o.reps},
            {"results", results},
            {"forward_costs", costs}};
  std::cout << j.dump(2) << "\n";
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  // stdout carries the JSON only; the engine's log lines go to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("dq-bench-spec"));
  CLI::App app{"dq-bench-spec: speculative decoding speed on the CPU or a CUDA GPU"};
  Options o;
  app.add_option("--target", o.target, "the target: a .gguf file or HF checkpoint")->required();
  app.add_option("--draft-base", o.draft_base, "what self:FORMAT quantizes (default: target)");
  app.add_option("--arm", o.arms, "plain, ngram, self:FORMAT[:GROUP], weights:PATH (repeat)");
  app.add_option("--batch", o.batches, "requests decoded together (repeat)");
  app.add_option("--gen-tokens", o.gen_tokens, "max tokens per request");
  app.add_option("--k", o.k, "draft tokens per step at most (adaptive)");
  app.add_option("--threads", o.threads, "CPU threads");
  app.add_option("--device", o.device, "cpu (default) or cuda (a release-cuda build)");
  app.add_flag("--batch-invariant", o.batch_invariant,
               "cuda: decode steps independent of their batch-mates (CudaBackendOptions)");
  app.add_option("--reps", o.reps, "repetitions (best is reported)");
  app.add_option("--prompts", o.prompts, "how many of the built-in prompts (at most 8)");
  app.add_option("--machine", o.machine, "machine description for the JSON");
  app.add_option("--commit", o.commit, "commit for the JSON");
  CLI11_PARSE(app, argc, argv);
  for (int i = 0; i < argc; ++i) o.command += (i ? " " : "") + std::string(argv[i]);
  const absl::Status s = Run(o);
  if (!s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return 1;
  }
  return 0;
}
