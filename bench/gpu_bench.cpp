// dq-bench-gpu: decode and prefill speed of the CUDA backend on a Qwen3-4B-shaped model with
// random weights, one run per weight format, each figure beside its roofline. Weights are made
// here (no checkpoint files): each format quantizes one random 64-row block per input width with
// our CPU codec and tiles it to the full matrix (speed does not depend on the values).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "bench/kernel_profile.h"
#include "bench/persistent_trace.h"
#include "common/logging.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/linear_fuse.h"
#include "engine/model/decoder_model.h"
#include "engine/quant/requantize.h"
#include "nlohmann/json.hpp"

namespace dq {
namespace {

constexpr double kHbmBytesPerSecond = 4.3e12;  // measured copy bandwidth (ANCHORS.md)
constexpr int kBlockRows = 64;

ModelConfig Qwen3_4B() {
  ModelConfig c;
  c.architecture = "qwen3";
  c.vocab_size = 151936;
  c.hidden_size = 2560;
  c.intermediate_size = 9728;
  c.num_layers = 36;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.rms_norm_eps = 1e-6f;
  c.rope_theta = 1000000.0f;
  c.max_context = 40960;
  c.tie_word_embeddings = true;
  return c;
}

struct Format {
  std::string name;    // "bf16", "fp8", "nvfp4", "int4", "lut2", "q4_k", ...
  std::string scheme;  // codec scheme ("" for bf16 / GGUF)
  int group = 0;
  ComputeMode mode = ComputeMode::kWeightOnly;
  std::string lm_head = "bf16";  // "+lm_int4" after a decode format: the lm_head quantized
  bool persistent = false;       // "+persistent" at the end: KernelOptions::persistent_decode
  int persistent_ctas = 1;       // "+persistent2": KernelOptions::persistent_ctas_per_sm = 2
  std::string label;             // the name as given ("int2+lm_int4"); empty: `name`
  const std::string& shown() const { return label.empty() ? name : label; }
};

std::vector<float> Random(int64_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

uint16_t Bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

uint16_t F16(float f) {  // small normal values only
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const int e = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  return static_cast<uint16_t>(((u >> 16) & 0x8000) | (e << 10) | ((u >> 13) & 0x3ff));
}

// One [kBlockRows, in] block in format `f`, as a LinearWeight owning its bytes.
absl::StatusOr<LinearWeight> Block(const Format& f, int64_t in, uint64_t seed) {
  LinearWeight w;
  w.out_features = kBlockRows;
  w.in_features = in;
  const std::vector<float> x = Random(kBlockRows * in, seed, 0.02f);
  if (f.name == "bf16") {
    w.dtype = DType::kBF16;
    w.row_bytes = in * 2;
    w.owned.resize(kBlockRows * in * 2);
    for (int64_t i = 0; i < kBlockRows * in; ++i) {
      const uint16_t b = Bf16(x[i]);
      std::memcpy(w.owned.data() + 2 * i, &b, 2);
    }
  } else if (f.name == "q4_k") {  // 144-byte blocks of 256: d, dmin (f16), 12 scale bytes, qs
    w.dtype = DType::kQ4_K;
    w.row_bytes = in / 256 * 144;
    w.owned.resize(kBlockRows * w.row_bytes);
    std::mt19937_64 rng(seed);
    for (auto& b : w.owned) b = static_cast<uint8_t>(rng());
    const uint16_t d = F16(1e-3f), dmin = F16(5e-4f);
    for (size_t at = 0; at < w.owned.size(); at += 144) {
      std::memcpy(&w.owned[at], &d, 2);
      std::memcpy(&w.owned[at + 2], &dmin, 2);
    }
  } else {
    DQ_ASSIGN_OR_RETURN(const WeightCodec* codec, FindWeightCodec(f.scheme));
    QuantizeOptions qo;
    qo.group_size = f.group;
    qo.shared_amax = 0.2f;  // one global scale for every matrix, so q|k|v and gate|up fuse
    DQ_ASSIGN_OR_RETURN(QuantizedTensors q, codec->Quantize(x.data(), kBlockRows, in, qo));
    auto owned = std::make_shared<QuantizedTensors>(std::move(q));
    w.codec = codec;
    w.quantized = owned->view;
    w.owned_quantized = owned;
    w.mode = f.mode;
    return w;
  }
  w.data = w.owned.data();
  return w;
}

// The block tiled to `out` rows.
absl::StatusOr<LinearWeight> Matrix(const LinearWeight& block, int64_t out) {
  std::vector<const LinearWeight*> parts(out / kBlockRows, &block);
  return cuda::ConcatRows(parts);
}

absl::StatusOr<ModelProgram> MakeWeights(const ModelConfig& c, const Format& f) {
  DQ_ASSIGN_OR_RETURN(LinearWeight b_h, Block(f, c.hidden_size, 1));
  DQ_ASSIGN_OR_RETURN(LinearWeight b_q, Block(f, c.q_dim(), 2));
  DQ_ASSIGN_OR_RETURN(LinearWeight b_i, Block(f, c.intermediate_size, 3));
  ModelProgram w;
  for (int l = 0; l < c.num_layers; ++l) {
    AttentionBlock a;
    MlpBlock m;
    a.norm.assign(c.hidden_size, 1.0f);
    m.norm.assign(c.hidden_size, 1.0f);
    a.q_norm.assign(c.head_dim, 1.0f);
    a.k_norm.assign(c.head_dim, 1.0f);
    DQ_ASSIGN_OR_RETURN(a.q, Matrix(b_h, c.q_dim()));
    DQ_ASSIGN_OR_RETURN(a.k, Matrix(b_h, c.kv_dim()));
    DQ_ASSIGN_OR_RETURN(a.v, Matrix(b_h, c.kv_dim()));
    DQ_ASSIGN_OR_RETURN(a.o, Matrix(b_q, c.hidden_size));
    DQ_ASSIGN_OR_RETURN(m.gate, Matrix(b_h, c.intermediate_size));
    DQ_ASSIGN_OR_RETURN(m.up, Matrix(b_h, c.intermediate_size));
    DQ_ASSIGN_OR_RETURN(m.down, Matrix(b_i, c.hidden_size));
    w.layers.push_back(AttentionMlpLayer(std::move(a), std::move(m)));
  }
  DQ_ASSIGN_OR_RETURN(LinearWeight e, Block({"bf16"}, c.hidden_size, 4));
  DQ_ASSIGN_OR_RETURN(w.embedding, Matrix(e, c.vocab_size));
  w.lm_head = w.embedding;  // tied (the copy shares nothing on the device either way)
  w.lm_head.data = w.lm_head.owned.data();
  if (!KeepsStoredLmHead(f.lm_head)) {
    DQ_ASSIGN_OR_RETURN(w.lm_head, RequantizeLinear(w.embedding, f.lm_head));
  }
  w.final_norm.assign(c.hidden_size, 1.0f);
  w.Finalize();
  return w;
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<int32_t> Tokens(int n, uint64_t seed, int vocab) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

struct Bench {
  const ModelConfig& c;
  const ForwardModel& model;
  KvBlockPool& pool;
  ThreadPool& threads;
};

// Decode tok/s at batch `b` after a `context`-token prompt per sequence.
absl::StatusOr<nlohmann::json> Decode(Bench& x, int b, int context, int steps, bool profile) {
  std::vector<KvSequence> seqs(b);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < b; ++i) prompts.push_back(Tokens(context, 10 + i, x.c.vocab_size));
  Batch pre{Phase::kPrefill, {}};
  for (int i = 0; i < b; ++i) {
    x.pool.extend(seqs[i], context + steps + 8);
    pre.items.push_back({&seqs[i], prompts[i], false});
  }
  BatchLogits logits;
  DQ_RETURN_IF_ERROR(x.model.Forward(pre, x.pool, x.threads, &logits, {}));
  std::vector<int32_t> next(b, 1), sampled(b, 0);
  // As the decode worker runs a step: greedy tokens picked on the device, only ids come back.
  const std::vector<DeviceSampling> greedy(b, DeviceSampling{0.0f, 0, 1.0f, 0.0f, 0.0});
  auto step = [&]() -> absl::Status {
    Batch d{Phase::kDecode, {}};
    for (int i = 0; i < b; ++i) d.items.push_back({&seqs[i], std::span(&next[i], 1), false});
    return x.model.ForwardSample(d, x.pool, x.threads, greedy, sampled, {});
  };
  for (int i = 0; i < 3; ++i) DQ_RETURN_IF_ERROR(step());  // graph capture + warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) DQ_RETURN_IF_ERROR(step());
  const double s = Seconds(t0);
  nlohmann::json r = {{"batch", b},
                      {"context", context},
                      {"steps", steps},
                      {"ms_per_step", 1e3 * s / steps},
                      {"sampling", "greedy on the device (ForwardSample)"},
                      {"tokens_per_second", b * steps / s}};
  bench::KernelProfiler prof;
  if (profile && prof.Start()) {
    constexpr int kProfiled = 8;
    for (int i = 0; i < kProfiled; ++i) DQ_RETURN_IF_ERROR(step());
    const bench::ProfileSummary p = prof.Stop(kProfiled);
    bench::Print(p, 14);
    r["profile_per_step"] = bench::ToJson(p, 24);
  }
  for (auto& q : seqs) x.pool.release(q);
  return r;
}

absl::StatusOr<double> PrefillSeconds(Bench& x, int len) {
  KvSequence seq;
  x.pool.extend(seq, len);
  const std::vector<int32_t> t = Tokens(len, 99, x.c.vocab_size);
  BatchLogits logits;
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s =
      x.model.Forward(Batch{Phase::kPrefill, {{&seq, t, false}}}, x.pool, x.threads, &logits, {});
  const double secs = Seconds(t0);
  x.pool.release(seq);
  DQ_RETURN_IF_ERROR(s);
  return secs;
}

}  // namespace
}  // namespace dq

namespace dq {
namespace {

struct Options {
  std::vector<std::string> decode_formats = {"bf16", "fp8",  "nvfp4", "int4", "int3",
                                             "int2", "lut3", "lut2",  "q4_k"};
  std::vector<std::string> prefill_formats = {"bf16", "fp8", "nvfp4"};
  std::vector<int> batches = {1, 4, 8};
  std::vector<int> prefill_lengths = {512, 2048, 8192, 32768};
  int context = 128;
  int steps = 64;
  bool profile = false;           // per-kernel device time (CUPTI) of decode steps and 8K prefills
  bool fp8_attention = false;     // CudaBackendOptions::fp8_attention for the fp8 prefill runs
  bool persistent_trace = false;  // +persistent runs: where each step's time goes, per task kind
  std::string out = "gpu_bench.json";
};

absl::StatusOr<Format> ParseBaseFormat(const std::string& name, bool prefill);

// A format name, for decode optionally followed by "+lm_" and an lm_head format
// ("int2+lm_int4": int2 layers, the lm_head quantized to int4 at load).
absl::StatusOr<Format> ParseFormat(const std::string& name, bool prefill) {
  for (const std::string_view suffix : {"+persistent", "+persistent2"}) {
    if (prefill || name.size() <= suffix.size() || !name.ends_with(suffix)) continue;
    DQ_ASSIGN_OR_RETURN(Format f,
                        ParseFormat(name.substr(0, name.size() - suffix.size()), prefill));
    f.persistent = true;
    f.persistent_ctas = suffix.ends_with('2') ? 2 : 1;
    f.label = name;
    return f;
  }
  const size_t plus = name.find("+lm_");
  if (plus == std::string::npos) return ParseBaseFormat(name, prefill);
  if (prefill) return absl::InvalidArgumentError("+lm_ is for decode formats: " + name);
  DQ_ASSIGN_OR_RETURN(Format f, ParseBaseFormat(name.substr(0, plus), prefill));
  f.lm_head = name.substr(plus + 4);
  DQ_RETURN_IF_ERROR(CheckLmHeadFormat(f.lm_head));
  f.label = name;
  return f;
}

absl::StatusOr<Format> ParseBaseFormat(const std::string& name, bool prefill) {
  if (name == "bf16" || name == "q4_k") return Format{name, "", 0, ComputeMode::kWeightOnly};
  if (name == "fp8") return Format{name, "fp8", 0, ComputeMode::kW8A8};
  if (name == "nvfp4") {
    return Format{name, "nvfp4", 0, prefill ? ComputeMode::kW4A4 : ComputeMode::kWeightOnly};
  }
  if (name == "int4" || name == "int3") return Format{name, name, 128, ComputeMode::kWeightOnly};
  if (name == "int2") return Format{name, name, 64, ComputeMode::kWeightOnly};
  if (name == "lut3" || name == "lut2") return Format{name, name, 0, ComputeMode::kWeightOnly};
  return absl::InvalidArgumentError(absl::StrCat("unknown format ", name));
}

// Linear-layer FLOPs and causal attention FLOPs of one prefill of `len` tokens.
std::pair<double, double> PrefillFlops(const ModelConfig& c, int len) {
  const double per_layer = double(c.hidden_size) * (c.q_dim() + 2 * c.kv_dim()) +
                           double(c.q_dim()) * c.hidden_size +
                           3.0 * c.hidden_size * c.intermediate_size;
  const double linear = 2.0 * len * per_layer * c.num_layers;
  const double attn = 2.0 * double(len) * len * c.num_heads * c.head_dim * c.num_layers;
  return {linear, attn};
}

absl::StatusOr<nlohmann::json> RunFormat(const ModelConfig& c, const Format& f, bool prefill,
                                         const Options& o) {
  std::fprintf(stderr, "dq-bench-gpu: %s (%s): building weights...\n", f.shown().c_str(),
               prefill ? "prefill" : "decode");
  DQ_ASSIGN_OR_RETURN(ModelProgram w, MakeWeights(c, f));
  DecoderModel cpu(c, std::move(w));
  KvCacheOptions kv{c.num_layers, c.num_kv_heads, c.head_dim, 16, 0, false};
  const int max_tokens = prefill ? o.prefill_lengths.back() : o.context + o.steps + 64;
  kv.num_blocks = (max_tokens * (prefill ? 1 : o.batches.back()) + 16 * 64) / 16;
  cuda::CudaBackendOptions co;
  co.max_batch_tokens = prefill ? o.prefill_lengths.back() : o.context * o.batches.back();
  co.fp8_attention = prefill && o.fp8_attention;
  co.kernels.persistent_decode = f.persistent;
  co.kernels.persistent_ctas_per_sm = f.persistent_ctas;
  DQ_ASSIGN_OR_RETURN(BackendModels m, cuda::CudaBackendFactory(co)(cpu, cpu, kv));
  auto& model = static_cast<cuda::CudaDecoderModel&>(*m.decode);
  const bool traced = f.persistent && o.persistent_trace;
  model.set_persistent_trace(traced);
  KvBlockPool pool(kv);
  ThreadPool threads(1);
  Bench b{c, model, pool, threads};
  const double embedding = 2.0 * c.vocab_size * c.hidden_size;
  const double step_bytes = model.stats().weight_bytes - embedding;  // one row of it is read
  nlohmann::json r = {{"format", f.shown()},
                      {"compute", ComputeModeName(f.mode)},
                      {"lm_head", f.lm_head},
                      {"device_weight_bytes", model.stats().weight_bytes},
                      {"fused_qkv_layers", model.stats().fused_qkv_layers},
                      {"fp8_attention", model.stats().fp8_attention}};
  if (!prefill) {
    r["decode_bytes_per_step"] = step_bytes;
    r["roofline_tokens_per_second_batch1"] = kHbmBytesPerSecond / step_bytes;
    for (int batch : o.batches) {
      DQ_ASSIGN_OR_RETURN(nlohmann::json d, Decode(b, batch, o.context, o.steps, o.profile));
      d["fraction_of_roofline"] =
          d["tokens_per_second"].get<double>() / batch / (kHbmBytesPerSecond / step_bytes);
      std::fprintf(stderr, "  batch %d: %.1f tok/s (%.0f%% of the weight-streaming roofline)\n",
                   batch, d["tokens_per_second"].get<double>(),
                   100 * d["fraction_of_roofline"].get<double>());
      if (traced) {
        d["traced"] = true;  // 3 timer stores per task: the figures include them
        absl::StatusOr<std::vector<cuda::CudaDecoderModel::PersistentTaskTime>> t =
            model.PersistentDecodeTrace(batch);
        if (t.ok()) d["persistent_trace"] = bench::SummarizePersistentTrace(*t);
      }
      r["decode"].push_back(d);
    }
    // The batch sizes that ran as one persistent kernel per step (the others fell back).
    if (f.persistent) r["persistent_decode_batches"] = model.persistent_decode_batches();
    return r;
  }
  DQ_RETURN_IF_ERROR(PrefillSeconds(b, 512).status());  // warm-up
  for (int len : o.prefill_lengths) {
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      DQ_ASSIGN_OR_RETURN(double s, PrefillSeconds(b, len));
      best = std::min(best, s);
    }
    const auto [linear, attn] = PrefillFlops(c, len);
    const double peak = f.name == "fp8" ? 1.40e15 : 0.79e15;  // cuBLASLt, ANCHORS.md
    const double floor = linear / peak + attn / 0.79e15;
    std::fprintf(stderr, "  prefill %d tokens: %.1f ms (floor %.1f ms)\n", len, 1e3 * best,
                 1e3 * floor);
    nlohmann::json e = {{"tokens", len},
                        {"ms", 1e3 * best},
                        {"floor_ms", 1e3 * floor},
                        {"tflops", (linear + attn) / best / 1e12}};
    bench::KernelProfiler prof;
    if (o.profile && len == 8192 && prof.Start()) {
      DQ_RETURN_IF_ERROR(PrefillSeconds(b, len).status());
      const bench::ProfileSummary p = prof.Stop(1);
      bench::Print(p, 14);
      e["profile"] = bench::ToJson(p, 24);
    }
    r["prefill"].push_back(e);
  }
  return r;
}

int Main(int argc, char** argv) {
  dq::LogToStderr();
  CLI::App app{"dq-bench-gpu: CUDA decode/prefill speed on a Qwen3-4B-shaped random model"};
  Options o;
  // expected(0, -1): a flag with no values turns that phase off (e.g. --prefill-formats).
  app.add_option("--decode-formats", o.decode_formats,
                 "formats for the decode runs (FORMAT+lm_F: the lm_head quantized to F, e.g. "
                 "int2+lm_int4; FORMAT+persistent: one persistent kernel per decode step, "
                 "+persistent2: two CTAs of it per SM)")
      ->expected(0, -1);
  app.add_option("--prefill-formats", o.prefill_formats, "formats for the prefill runs")
      ->expected(0, -1);
  app.add_option("--batches", o.batches, "decode batch sizes");
  app.add_option("--prefill-lengths", o.prefill_lengths, "prompt lengths");
  app.add_option("--steps", o.steps, "timed decode steps");
  app.add_option("--context", o.context, "prompt tokens before the timed decode steps");
  app.add_option("--out", o.out, "JSON results");
  app.add_flag("--profile", o.profile, "per-kernel device time of decode steps / 8K prefills");
  app.add_flag("--fp8-attention", o.fp8_attention, "fp8 prefill runs: attention in FP8 too");
  app.add_flag("--persistent-trace", o.persistent_trace,
               "+persistent runs: per-task times of a step, summed per task kind");
  CLI11_PARSE(app, argc, argv);
  std::erase(o.decode_formats, std::string());  // a bare flag may leave one empty value
  std::erase(o.prefill_formats, std::string());
  const ModelConfig c = Qwen3_4B();
  nlohmann::json out = {{"model", "Qwen3-4B shape, random weights"},
                        {"runs", nlohmann::json::array()}};
  int failures = 0;
  for (const auto& [list, prefill] :
       {std::pair{&o.decode_formats, false}, std::pair{&o.prefill_formats, true}}) {
    for (const std::string& name : *list) {
      absl::StatusOr<Format> f = ParseFormat(name, prefill);
      absl::StatusOr<nlohmann::json> r =
          f.ok() ? RunFormat(c, *f, prefill, o) : absl::StatusOr<nlohmann::json>(f.status());
      if (!r.ok()) {
        std::fprintf(stderr, "  %s: %s\n", name.c_str(), std::string(r.status().message()).c_str());
        out["runs"].push_back({{"format", name}, {"error", std::string(r.status().message())}});
        ++failures;
        continue;
      }
      (*r)["phase"] = prefill ? "prefill" : "decode";
      out["runs"].push_back(*r);
      std::ofstream(o.out) << out.dump(2) << "\n";  // keep what finished if a later run dies
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace dq

int main(int argc, char** argv) { return dq::Main(argc, argv); }
