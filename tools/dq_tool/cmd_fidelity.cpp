// dq-tool fidelity: how far a deployment's per-phase formats move the model's predictions.
// Teacher-forced over a fixed text: the first --prefix tokens run as one prefill on the prefill
// weights, every later token as a single-token decode step on the decode weights (reading the
// prefill's KV, as a disaggregated deployment does). Each position's next-token distribution
// is compared with the reference model's: KL(ref || run), top-1 agreement, perplexity.
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "common/lm_head_format.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_runner.h"
#include "tools/dq_tool/commands.h"

namespace dq::tool {
namespace {

struct FidelityOptions {
  std::string reference;
  std::string text_file;
  std::vector<std::string> runs;  // "label=PREFILL[:mode[+fp8attn]][,DECODE[:mode[+lm_head=F]]]"
  int tokens = 384;
  int prefix = 192;
  int threads = 0;
  bool json = false;
};

struct RunSpec {
  std::string label;
  std::string prefill_path, decode_path;
  ComputeMode prefill_mode = ComputeMode::kWeightOnly, decode_mode = ComputeMode::kWeightOnly;
  bool fp8_attention = false;  // prefill passes in emulated FP8 attention ("+fp8attn")
  std::string decode_lm_head;  // the decode phase's PhaseWeights::lm_head ("+lm_head=int4")
  bool q8_decode = false;      // decode steps on the fast 8-bit-activation path ("+q8")
};

// A phase's MODE may end in this: FP8 prefill attention (DecoderModelOptions), with w8a8.
constexpr char kFp8AttnSuffix[] = "+fp8attn";
// The decode phase's MODE may end in this and an lm_head format (common/lm_head_format.h).
constexpr char kLmHeadSuffix[] = "+lm_head=";
// ... and, last, this: decode steps with 8-bit activations and integer dots (cpu_q8_decode).
constexpr char kQ8Suffix[] = "+q8";

struct Stats {  // sums over positions
  double kl = 0, nll = 0;
  int agree = 0, n = 0;
  nlohmann::json Json() const {
    return {{"positions", n},
            {"kl", n ? kl / n : 0.0},
            {"top1_agreement", n ? double(agree) / n : 0.0},
            {"perplexity", n ? std::exp(nll / n) : 0.0}};
  }
};

absl::StatusOr<RunSpec> ParseRun(const std::string& s) {
  RunSpec r;
  const size_t eq = s.find('=');
  if (eq == std::string::npos)
    return absl::InvalidArgumentError(
        "--run needs LABEL=PREFILL[:MODE[+fp8attn]][,DECODE[:MODE[+lm_head=F][+q8]]]: " + s);
  r.label = s.substr(0, eq);
  std::vector<std::string> phases = absl::StrSplit(s.substr(eq + 1), ',');
  // PATH[:MODE[+fp8attn][+lm_head=F][+q8]] of one phase.
  struct PhaseSpec {
    std::string path, lm_head;
    ComputeMode mode = ComputeMode::kWeightOnly;
    bool fp8_attention = false, q8 = false;
  };
  auto parse = [](const std::string& p, PhaseSpec* out) -> absl::Status {
    const size_t colon = p.rfind(':');
    out->path = colon == std::string::npos ? p : p.substr(0, colon);
    if (colon == std::string::npos) return absl::OkStatus();
    std::string m = p.substr(colon + 1);
    out->q8 = absl::EndsWith(m, kQ8Suffix);
    if (out->q8) m.resize(m.size() - std::strlen(kQ8Suffix));
    if (const size_t lm = m.find(kLmHeadSuffix); lm != std::string::npos) {
      out->lm_head = m.substr(lm + std::strlen(kLmHeadSuffix));
      DQ_RETURN_IF_ERROR(CheckLmHeadFormat(out->lm_head));
      m.resize(lm);
    }
    out->fp8_attention = absl::EndsWith(m, kFp8AttnSuffix);
    if (out->fp8_attention) m.resize(m.size() - std::strlen(kFp8AttnSuffix));
    DQ_ASSIGN_OR_RETURN(out->mode, ParseComputeMode(m));
    return absl::OkStatus();
  };
  PhaseSpec prefill;
  DQ_RETURN_IF_ERROR(parse(phases[0], &prefill));
  if (!prefill.lm_head.empty() || prefill.q8) {
    return absl::InvalidArgumentError(
        "--run: +lm_head= and +q8 are for the decode phase (LABEL=PREFILL,DECODE:MODE+q8): " + s);
  }
  r.prefill_path = prefill.path;
  r.prefill_mode = prefill.mode;
  r.fp8_attention = prefill.fp8_attention;
  // One phase given: both phases run it, in the same compute mode.
  r.decode_path = r.prefill_path;
  r.decode_mode = r.prefill_mode;
  if (phases.size() > 1) {
    PhaseSpec decode;
    DQ_RETURN_IF_ERROR(parse(phases[1], &decode));
    if (decode.fp8_attention) {
      return absl::InvalidArgumentError(
          "--run: +fp8attn is for the prefill phase (decode steps keep exact attention): " + s);
    }
    r.decode_path = decode.path;
    r.decode_mode = decode.mode;
    r.decode_lm_head = decode.lm_head;
    r.q8_decode = decode.q8;
  }
  return r;
}

// Next-token logits at every position: positions [0, prefix) from one prefill, the rest from
// single-token decode steps.
absl::StatusOr<std::vector<std::vector<float>>> AllLogits(ModelRunner& runner,
                                                          const std::vector<int32_t>& ids,
                                                          int prefix) {
  KvSequence seq;
  runner.kv_pool().extend(seq, static_cast<int>(ids.size()));
  std::vector<std::vector<float>> out;
  BatchLogits logits;
  Batch pre{Phase::kPrefill, {{&seq, std::span(ids).first(prefix), true}}};
  DQ_RETURN_IF_ERROR(runner.Forward(pre, &logits));
  for (int p = 0; p < prefix; ++p) out.emplace_back(logits.row(p), logits.row(p) + logits.vocab);
  for (size_t t = prefix; t < ids.size(); ++t) {
    Batch step{Phase::kDecode, {{&seq, std::span(ids).subspan(t, 1), false}}};
    DQ_RETURN_IF_ERROR(runner.Forward(step, &logits));
    out.emplace_back(logits.row(0), logits.row(0) + logits.vocab);
  }
  runner.kv_pool().release(seq);
  return out;
}

std::vector<double> LogSoftmax(const std::vector<float>& x) {
  double mx = -INFINITY, sum = 0;
  for (float v : x) mx = std::max(mx, double{v});
  for (float v : x) sum += std::exp(v - mx);
  std::vector<double> out(x.size());
  const double lse = mx + std::log(sum);
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] - lse;
  return out;
}

void Accumulate(const std::vector<float>& ref, const std::vector<float>& run, int32_t next,
                Stats& s) {
  const std::vector<double> lr = LogSoftmax(ref), lq = LogSoftmax(run);
  double kl = 0;
  for (size_t i = 0; i < lr.size(); ++i) kl += std::exp(lr[i]) * (lr[i] - lq[i]);
  s.kl += kl;
  s.nll -= lq[next];
  s.agree += std::max_element(ref.begin(), ref.end()) - ref.begin() ==
             std::max_element(run.begin(), run.end()) - run.begin();
  ++s.n;
}

class ModelCache {
 public:
  absl::StatusOr<Model*> Get(const std::string& path) {
    auto it = models_.find(path);
    if (it != models_.end()) return it->second.get();
    DQ_ASSIGN_OR_RETURN(auto m, LoadModel(path));
    return (models_[path] = std::move(m)).get();
  }

 private:
  std::map<std::string, std::unique_ptr<Model>> models_;
};

absl::StatusOr<nlohmann::json> EvaluateRun(const RunSpec& r, ModelCache& cache,
                                           const std::vector<int32_t>& ids,
                                           const std::vector<std::vector<float>>& ref,
                                           const FidelityOptions& o) {
  DQ_ASSIGN_OR_RETURN(Model * pm, cache.Get(r.prefill_path));
  DQ_ASSIGN_OR_RETURN(Model * dm, cache.Get(r.decode_path));
  ModelRunnerOptions ro;
  ro.threads = o.threads;
  ro.kv_capacity = static_cast<int>(ids.size()) + 16;
  ro.cpu_prefill.fp8_prefill_attention = r.fp8_attention;
  ro.cpu_q8_decode = r.q8_decode;  // passes of up to 8 rows: the decode steps, not the prefill
  DQ_ASSIGN_OR_RETURN(
      auto runner,
      ModelRunner::Create(
          PhaseWeights{pm->checkpoint.get(), &pm->config, r.prefill_mode},
          PhaseWeights{dm->checkpoint.get(), &dm->config, r.decode_mode, r.decode_lm_head}, ro));
  DQ_ASSIGN_OR_RETURN(auto logits, AllLogits(*runner, ids, o.prefix));
  Stats prefill, decode, all;
  for (size_t t = 0; t + 1 < ids.size(); ++t) {
    Accumulate(ref[t], logits[t], ids[t + 1], static_cast<int>(t) < o.prefix ? prefill : decode);
    Accumulate(ref[t], logits[t], ids[t + 1], all);
  }
  return nlohmann::json{
      {"label", r.label},
      {"prefill",
       {{"weights", r.prefill_path},
        {"compute", ComputeModeName(r.prefill_mode)},
        {"attention", r.fp8_attention ? "fp8 (cpu emulation)" : "exact"}}},
      {"decode",
       {{"weights", r.decode_path},
        {"compute", ComputeModeName(r.decode_mode)},
        {"lm_head", KeepsStoredLmHead(r.decode_lm_head) ? "stored" : r.decode_lm_head},
        {"activations", r.q8_decode ? "q8 (fast path)" : "fp32"}}},
      {"prefill_side", prefill.Json()},
      {"decode_side", decode.Json()},
      {"all", all.Json()}};
}

absl::StatusOr<std::vector<int32_t>> TextTokens(const FidelityOptions& o, const Model& ref) {
  std::ifstream f(o.text_file, std::ios::binary);
  if (!f) return absl::NotFoundError("cannot read --text " + o.text_file);
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<int32_t> ids = ref.tokenizer.Encode(ss.str(), /*parse_special=*/false);
  if (static_cast<int>(ids.size()) < o.tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("the text has ", ids.size(), " tokens; --tokens asks for ", o.tokens));
  }
  if (o.prefix < 1 || o.prefix >= o.tokens) {
    return absl::InvalidArgumentError("--prefix must be in [1, --tokens)");
  }
  ids.resize(o.tokens);
  return ids;
}

void PrintTable(const nlohmann::json& report) {
  std::printf("%-28s %10s %8s %8s %10s %8s %8s\n", "run", "KL prefill", "top1", "ppl", "KL decode",
              "top1", "ppl");
  for (const auto& r : report["runs"]) {
    const auto &p = r["prefill_side"], &d = r["decode_side"];
    std::printf("%-28s %10.5f %7.1f%% %8.3f %10.5f %7.1f%% %8.3f\n",
                r["label"].get<std::string>().c_str(), p["kl"].get<double>(),
                100 * p["top1_agreement"].get<double>(), p["perplexity"].get<double>(),
                d["kl"].get<double>(), 100 * d["top1_agreement"].get<double>(),
                d["perplexity"].get<double>());
  }
}

absl::Status RunFidelity(const FidelityOptions& o) {
  ModelCache cache;
  DQ_ASSIGN_OR_RETURN(Model * ref, cache.Get(o.reference));
  DQ_ASSIGN_OR_RETURN(std::vector<int32_t> ids, TextTokens(o, *ref));
  std::vector<RunSpec> specs;
  for (const std::string& s : o.runs) {
    DQ_ASSIGN_OR_RETURN(RunSpec r, ParseRun(s));
    specs.push_back(r);
  }
  ModelRunnerOptions ro;
  ro.threads = o.threads;
  ro.kv_capacity = o.tokens + 16;
  DQ_ASSIGN_OR_RETURN(auto ref_runner, ModelRunner::Create(*ref->checkpoint, ref->config, ro));
  DQ_ASSIGN_OR_RETURN(auto ref_logits, AllLogits(*ref_runner, ids, o.tokens));
  nlohmann::json report = {{"reference", o.reference},
                           {"text", o.text_file},
                           {"tokens", o.tokens},
                           {"prefix", o.prefix},
                           {"runs", nlohmann::json::array()}};
  for (size_t i = 0; i < specs.size(); ++i) {
    std::fprintf(stderr, "fidelity: [%zu/%zu] %s\n", i + 1, specs.size(), specs[i].label.c_str());
    DQ_ASSIGN_OR_RETURN(nlohmann::json r, EvaluateRun(specs[i], cache, ids, ref_logits, o));
    report["runs"].push_back(r);
  }
  if (o.json) {
    std::cout << report.dump(2) << "\n";
  } else {
    PrintTable(report);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterFidelity(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<FidelityOptions>();
  CLI::App* cmd = app.add_subcommand("fidelity", "KL / top-1 / perplexity of per-phase formats");
  cmd->add_option("--reference", o->reference, "the model as shipped")->required();
  cmd->add_option("--text", o->text_file, "text to teacher-force")->required();
  cmd->add_option(
         "--run", o->runs,
         "LABEL=PREFILL[:MODE[+fp8attn]][,DECODE[:MODE[+lm_head=F]]] (MODE: "
         "weight_only, w8a8, w4a4; +fp8attn: the prefill pass's attention in FP8 e4m3 "
         "as the CUDA FP8 prefill kernel computes it, emulated on the CPU; needs w8a8 on "
         "fp8 weights; +lm_head=F: the decode phase's lm_head quantized to F at load, "
         "int8, int4, int3, int2 or nvfp4; +q8, last: decode steps with 8-bit activations and "
         "integer dots on GGUF Q4_1 / Q8_0); repeatable")
      ->required();
  cmd->add_option("--tokens", o->tokens, "tokens of the text to use");
  cmd->add_option("--prefix", o->prefix, "tokens run as the prefill phase");
  cmd->add_option("--threads", o->threads, "CPU threads");
  cmd->add_flag("--json", o->json, "print JSON instead of a table");
  cmd->callback([o, exit_code] {
    const absl::Status s = RunFidelity(*o);
    if (!s.ok()) {
      std::cerr << "error: " << s.message() << "\n";
      *exit_code = 1;
    }
  });
}

}  // namespace dq::tool
