// dq-bench-odp: time to first token of offloaded disaggregated prefill (ODP, docs/odp.md) on a
// Qwen3-4B-shaped model with random weights, against prefill on resident weight-only decode
// weights (int2, int4) and resident FP8 prefill. ODP configurations keep int2 decode weights
// resident and stream an NVFP4 or FP8 prefill image, written here to --image-dir, from the disk
// (cold: page cache dropped before every pass; warm) or from pinned host memory. Every figure
// stands beside its floor: streamed bytes over the measured link/disk bandwidth, and the FLOP
// floor of the prefill (ANCHORS.md peaks). Device memory is measured per configuration.
// "+fp8attn" configurations run the FP8 models' prefill attention in FP8 too
// (CudaBackendOptions::fp8_attention); "+int4" pairs ODP with resident int4 decode weights.
//
// The random model, formats and FLOP counts are dq-bench-gpu's (bench/gpu_bench.cpp), included
// here with its main renamed rather than copied, so both benches measure the same model.
#define main dq_bench_gpu_main
#include "bench/gpu_bench.cpp"
#undef main

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "common/logging.h"
#include "engine/cuda/odp_backend.h"
#include "engine/cuda/weight_stream.h"

namespace dq::odp_bench {
namespace {

constexpr double kBf16Flops = 0.79e15;  // cuBLASLt bf16 on the H200 (ANCHORS.md)
constexpr double kFp8Flops = 1.40e15;

struct Options {
  std::vector<int> lengths = {128, 1024, 4096, 8192, 16384, 32768};
  std::vector<std::string> configs = {"wo-int2",
                                      "wo-int4",
                                      "odp-nvfp4-disk",
                                      "odp-nvfp4-host",
                                      "odp-fp8-disk",
                                      "odp-fp8-host",
                                      "odp-fp8-host-policy",
                                      "resident-fp8",
                                      "odp-fp8-host+fp8attn",
                                      "odp-fp8-host+int4+fp8attn",
                                      "odp-fp8-host-policy+fp8attn",
                                      "resident-fp8+fp8attn"};
  std::string image_dir = "/tmp";
  int slots = 2;
  int repeats = 3;
  std::string out = "odp_bench.json";
  std::string machine, commit, command;
};

// One deployment: what is resident, what (if anything) is streamed, and from where.
struct Config {
  std::string name;
  std::string resident;  // format of the resident weights (decode, or fp8 for the reference)
  std::string streamed;  // "" or the prefill format streamed
  cuda::WeightSource source = cuda::WeightSource::kFile;
  // The crossover calibrated at start-up and every pass routed by it (OdpForwardModel), so the
  // run shows which path the policy picks at each length; else every pass streams.
  bool policy = false;
  bool fp8_attention = false;  // CudaBackendOptions::fp8_attention (FP8 models only)
};

absl::StatusOr<Config> ParseBaseConfig(const std::string& n);

// Names: wo-int2, wo-int4, resident-fp8, odp-{nvfp4,fp8}-{disk,host}[-policy], with modifiers
// "+int4" (ODP over resident int4 instead of int2) and "+fp8attn" (FP8 prefill attention).
absl::StatusOr<Config> ParseConfig(const std::string& name) {
  std::string n = name;
  bool fp8_attention = false, int4 = false;
  for (bool found = true; found;) {
    found = false;
    for (const char* mod : {"+fp8attn", "+int4"}) {
      const size_t at = n.rfind(mod);
      if (at == std::string::npos || at + std::strlen(mod) != n.size()) continue;
      (std::string(mod) == "+int4" ? int4 : fp8_attention) = true;
      n.resize(at);
      found = true;
    }
  }
  absl::StatusOr<Config> c = ParseBaseConfig(n);
  if (!c.ok()) return c;
  if (int4 && c->streamed.empty()) {
    return absl::InvalidArgumentError(name + ": +int4 applies to odp-* configurations");
  }
  c->name = name;
  c->fp8_attention = fp8_attention;
  if (int4) c->resident = "int4";
  return c;
}

absl::StatusOr<Config> ParseBaseConfig(const std::string& n) {
  if (n == "wo-int2") return Config{n, "int2", ""};
  if (n == "wo-int4") return Config{n, "int4", ""};
  if (n == "resident-fp8") return Config{n, "fp8", ""};
  for (const char* f : {"nvfp4", "fp8"}) {
    for (bool policy : {false, true}) {
      const std::string tail = policy ? "-policy" : "";
      if (n == absl::StrCat("odp-", f, "-disk", tail)) {
        return Config{n, "int2", f, cuda::WeightSource::kFile, policy};
      }
      if (n == absl::StrCat("odp-", f, "-host", tail)) {
        return Config{n, "int2", f, cuda::WeightSource::kPinnedHost, policy};
      }
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown configuration ", n));
}

int64_t DeviceUsedBytes() {
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(total - free);
}

// Pinned host -> device copy bandwidth, bytes/s (the floor of a pinned-host stream).
double MeasureH2d() {
  constexpr size_t kBytes = size_t{1} << 30;
  void* host = nullptr;
  CUDA_CHECK(cudaMallocHost(&host, kBytes));
  cuda::DeviceBuffer dev(kBytes);
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    CUDA_CHECK(cudaMemcpy(dev.get(), host, kBytes, cudaMemcpyHostToDevice));
    best = std::max(best, kBytes / Seconds(t0));
  }
  CUDA_CHECK(cudaFreeHost(host));
  return best;
}

// pread bandwidth of a whole file in 8 MiB chunks on 4 threads (as the streamer reads it),
// bytes/s, cold (after dropping its pages) or warm.
absl::StatusOr<double> MeasureRead(const std::string& path, bool cold) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot open ", path));
  const int64_t size = ::lseek(fd, 0, SEEK_END);
  if (cold) ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  constexpr int64_t kChunk = int64_t{8} << 20;
  constexpr int kThreads = 4;
  std::vector<std::vector<char>> bufs(kThreads, std::vector<char>(kChunk));
  std::atomic<int64_t> next{0}, failed{0};
  ThreadPool pool(kThreads);
  const auto t0 = std::chrono::steady_clock::now();
  pool.ParallelFor(kThreads, 1, [&](int64_t b, int64_t) {
    for (int64_t c; (c = next.fetch_add(1)) * kChunk < size;) {
      if (::pread(fd, bufs[b].data(), kChunk, c * kChunk) <= 0) failed.fetch_add(1);
    }
  });
  const double s = Seconds(t0);
  ::close(fd);
  if (failed.load() > 0) return absl::UnavailableError(absl::StrCat("reading ", path, " failed"));
  return size / s;
}

struct Built {
  std::unique_ptr<DecoderModel> resident_cpu, streamed_cpu;
  BackendModels models;
  const ForwardModel* prefill = nullptr;  // what a long prompt runs on
  const cuda::CudaDecoderModel* streamed = nullptr;
  const cuda::CudaDecoderModel* resident = nullptr;
  const OdpForwardModel* router = nullptr;  // ODP configurations
  std::string image_path;
};

absl::StatusOr<Built> Build(const ModelConfig& c, const Config& cfg, const KvCacheOptions& kv,
                            const cuda::CudaBackendOptions& co, const Options& o) {
  Built b;
  DQ_ASSIGN_OR_RETURN(Format rf, ParseFormat(cfg.resident, /*prefill=*/cfg.resident == "fp8"));
  DQ_ASSIGN_OR_RETURN(ModelProgram rw, MakeWeights(c, rf));
  b.resident_cpu = std::make_unique<DecoderModel>(c, std::move(rw));
  if (cfg.streamed.empty()) {
    DQ_ASSIGN_OR_RETURN(b.models,
                        cuda::CudaBackendFactory(co)(*b.resident_cpu, *b.resident_cpu, kv));
    b.prefill = b.models.decode.get();
    b.resident = static_cast<const cuda::CudaDecoderModel*>(b.models.decode.get());
    b.resident_cpu.reset();
    return b;
  }
  DQ_ASSIGN_OR_RETURN(Format sf, ParseFormat(cfg.streamed, /*prefill=*/true));
  DQ_ASSIGN_OR_RETURN(ModelProgram sw, MakeWeights(c, sf));
  b.streamed_cpu = std::make_unique<DecoderModel>(c, std::move(sw));
  cuda::OdpOptions odp;
  odp.stream.slots = o.slots;
  odp.stream.source = cfg.source;
  b.image_path = absl::StrCat(o.image_dir, "/dq-odp-bench-", cfg.name, ".img");
  odp.stream.image_path = b.image_path;
  // Without the policy every timed pass streams and the crossover is read off the curves.
  odp.crossover_tokens = cfg.policy ? 0 : 1;
  DQ_ASSIGN_OR_RETURN(b.models,
                      cuda::OdpBackendFactory(co, odp)(*b.streamed_cpu, *b.resident_cpu, kv));
  const auto& router = static_cast<const OdpForwardModel&>(*b.models.prefill);
  b.router = &router;
  b.prefill = cfg.policy ? static_cast<const ForwardModel*>(&router) : &router.streamed();
  b.streamed = static_cast<const cuda::CudaDecoderModel*>(&router.streamed());
  b.resident = static_cast<const cuda::CudaDecoderModel*>(b.models.decode.get());
  // The device models keep nothing of the CPU weights (the streamer holds the image).
  b.streamed_cpu.reset();
  b.resident_cpu.reset();
  return b;
}

struct Links {
  double h2d = 0, disk_cold = 0, page_cache = 0;  // bytes/s
};

// The floor of one streamed pass: its image bytes over the slowest stage of the source.
double StreamFloor(const Config& cfg, bool cold, int64_t bytes, const Links& l) {
  if (cfg.streamed.empty()) return 0;
  if (cfg.source == cuda::WeightSource::kPinnedHost) return bytes / l.h2d;
  return bytes / std::min(l.h2d, cold ? l.disk_cold : l.page_cache);
}

double FlopFloor(const ModelConfig& c, const Config& cfg, int len) {
  const auto [linear, attn] = PrefillFlops(c, len);
  const std::string& f = cfg.streamed.empty() ? cfg.resident : cfg.streamed;
  const bool fp8_attn = f == "fp8" && cfg.fp8_attention;
  return linear / (f == "fp8" ? kFp8Flops : kBf16Flops) +
         attn / (fp8_attn ? kFp8Flops : kBf16Flops);
}

absl::StatusOr<double> Ttft(Bench& x, const Built& b, bool cold, int len, int repeats) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    if (cold) DQ_RETURN_IF_ERROR(b.streamed->weight_streamer()->DropPageCache());
    DQ_ASSIGN_OR_RETURN(double s, PrefillSeconds(x, len));
    best = std::min(best, s);
  }
  return best;
}

absl::StatusOr<nlohmann::json> RunConfig(const ModelConfig& c, const Config& cfg, Links l,
                                         const Options& o) {
  std::fprintf(stderr, "dq-bench-odp: %s: building...\n", cfg.name.c_str());
  const int longest = *std::max_element(o.lengths.begin(), o.lengths.end());
  KvCacheOptions kv{c.num_layers, c.num_kv_heads, c.head_dim, 16, 0, false};
  kv.num_blocks = (longest + 16 * 64) / 16;
  cuda::CudaBackendOptions co;
  co.max_batch_tokens = longest;
  co.fp8_attention = cfg.fp8_attention;
  const int64_t used0 = DeviceUsedBytes();
  DQ_ASSIGN_OR_RETURN(Built b, Build(c, cfg, kv, co, o));
  KvBlockPool pool(kv);
  ThreadPool threads(1);
  Bench x{c, *b.prefill, pool, threads};
  DQ_RETURN_IF_ERROR(PrefillSeconds(x, longest).status());  // warm-up at the largest scratch
  const int64_t used = DeviceUsedBytes() - used0;
  const cuda::CudaModelStats& rs = b.resident->stats();
  const cuda::CudaModelStats& ps = b.streamed ? b.streamed->stats() : rs;
  nlohmann::json r = {{"config", cfg.name},
                      {"resident_weights", cfg.resident},
                      {"fp8_attention", ps.fp8_attention},
                      {"device_bytes", used},
                      {"kv_cache_bytes", rs.kv_cache_bytes},
                      {"device_bytes_without_kv", used - rs.kv_cache_bytes},
                      {"resident_weight_bytes", rs.weight_bytes}};
  const int64_t image = b.streamed ? b.streamed->stats().streamed_image_bytes : 0;
  if (b.streamed && cfg.source == cuda::WeightSource::kFile) {
    DQ_ASSIGN_OR_RETURN(l.disk_cold, MeasureRead(b.image_path, /*cold=*/true));
    DQ_ASSIGN_OR_RETURN(l.page_cache, MeasureRead(b.image_path, /*cold=*/false));
    r["disk_cold_read_bytes_per_second"] = l.disk_cold;
    r["page_cache_read_bytes_per_second"] = l.page_cache;
  }
  if (b.streamed) {
    r["streamed_weights"] = cfg.streamed;
    r["source"] = cfg.source == cuda::WeightSource::kFile ? "disk" : "pinned host";
    r["streamed_bytes_per_pass"] = image;
    r["stream_slot_bytes"] = b.streamed->stats().stream_slot_bytes;
    r["slots"] = o.slots;
    r["shared_embedding_lm_head_bytes"] = b.streamed->stats().shared_weight_bytes;
    if (cfg.policy) {
      const int64_t crossover = b.router->crossover_tokens();
      r["calibrated_crossover_tokens"] = crossover == kOdpNeverStream ? -1 : crossover;
    }
  }
  std::vector<bool> modes = {false};
  if (b.streamed && cfg.source == cuda::WeightSource::kFile) modes = {true, false};
  for (bool cold : modes) {
    for (int len : o.lengths) {
      const int64_t streamed_before = b.router ? b.router->streamed_passes() : 0;
      DQ_ASSIGN_OR_RETURN(double s, Ttft(x, b, cold, len, o.repeats));
      const bool streamed = b.router && b.router->streamed_passes() > streamed_before;
      // A pass the policy kept on the resident weights has the weight-only floor.
      Config ran = cfg;
      if (cfg.policy && !streamed) ran.streamed.clear();
      const double flop = FlopFloor(c, ran, len);
      const double stream = StreamFloor(ran, cold, image, l);
      nlohmann::json e = {{"tokens", len},
                          {"ttft_ms", 1e3 * s},
                          {"floor_ms", 1e3 * std::max(flop, stream)},
                          {"flop_floor_ms", 1e3 * flop},
                          {"stream_floor_ms", 1e3 * stream}};
      if (cfg.policy) e["path"] = streamed ? "streamed" : "resident";
      std::fprintf(stderr, "  %s %6d tokens: %8.1f ms (floor %.1f: flops %.1f, stream %.1f)\n",
                   cold ? "cold" : (b.streamed ? "warm" : "    "), len, 1e3 * s,
                   1e3 * std::max(flop, stream), 1e3 * flop, 1e3 * stream);
      r[cold ? "ttft_cold" : "ttft"].push_back(e);
    }
  }
  return r;
}

// TTFT (warm) at `len` in a run, or 0.
double MsAt(const nlohmann::json& run, int len, const char* key = "ttft") {
  if (!run.contains(key)) return 0;
  for (const auto& e : run[key]) {
    if (e["tokens"].get<int>() == len) return e["ttft_ms"].get<double>();
  }
  return 0;
}

// ODP against weight-only prefill on the resident decode weights it is paired with (wo-int2 or
// wo-int4, same run): speedup at 8K, device memory ratio, and the crossover read off the two
// measured curves; for a policy run, its pick at each length against both fixed paths.
const nlohmann::json* Baseline(const nlohmann::json& runs, const nlohmann::json& r) {
  const std::string want = "wo-" + r.value("resident_weights", std::string("int2"));
  for (const auto& b : runs) {
    if (b.value("config", "") == want && b.contains("ttft")) return &b;
  }
  return nullptr;
}

nlohmann::json PolicyCheck(const nlohmann::json& runs, const nlohmann::json& r,
                           const nlohmann::json& base) {
  nlohmann::json check = {{"config", r["config"]},
                          {"baseline", base["config"]},
                          {"calibrated_crossover_tokens", r["calibrated_crossover_tokens"]}};
  std::string fixed = r["config"].get<std::string>();
  fixed.erase(fixed.find("-policy"), std::strlen("-policy"));
  for (const auto& other : runs) {
    if (other.value("config", "") != fixed) continue;
    for (const auto& e : r["ttft"]) {
      const int len = e["tokens"].get<int>();
      const double res = MsAt(base, len), str = MsAt(other, len);
      check["lengths"].push_back({{"tokens", len},
                                  {"path", e["path"]},
                                  {"policy_ms", e["ttft_ms"]},
                                  {"resident_wo_ms", res},
                                  {"streamed_ms", str},
                                  {"faster_path", str < res ? "streamed" : "resident"}});
    }
  }
  return check;
}

nlohmann::json Summary(const nlohmann::json& runs, const Options& o) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : runs) {
    if (!r.contains("streamed_weights")) continue;
    const nlohmann::json* base = Baseline(runs, r);
    if (base == nullptr) continue;
    if (r.contains("calibrated_crossover_tokens")) {
      out.push_back(PolicyCheck(runs, r, *base));
      continue;
    }
    for (const char* key : {"ttft_cold", "ttft"}) {
      if (!r.contains(key)) continue;
      std::vector<OdpTiming> t;
      for (int len : o.lengths) {
        t.push_back({len, MsAt(*base, len) / 1e3, MsAt(r, len, key) / 1e3});
      }
      absl::StatusOr<int64_t> x = CrossoverFromTimings(t);
      const double at8k = MsAt(r, 8192, key);
      out.push_back({{"config", r["config"]},
                     {"baseline", (*base)["config"]},
                     {"page_cache", std::string(key) == "ttft_cold" ? "cold" : "warm"},
                     {"speedup_vs_wo_at_8k", at8k > 0 ? MsAt(*base, 8192) / at8k : 0},
                     {"device_bytes_vs_wo",
                      r["device_bytes"].get<double>() / (*base)["device_bytes"].get<double>()},
                     {"crossover_tokens_vs_wo",
                      !x.ok() ? -1 : (*x == kOdpNeverStream ? -1 : static_cast<double>(*x))}});
    }
  }
  return out;
}

void WriteMarkdown(const nlohmann::json& out, const Options& o, const std::string& path) {
  std::ofstream md(path);
  md << "# ODP: TTFT vs prompt length (Qwen3-4B shape, random weights)\n\n"
     << "machine: " << o.machine << "; commit " << o.commit << "; `" << o.command << "`\n\n"
     << "ms (floor ms); floor = max(FLOP floor, streamed bytes / measured link or disk)\n\n"
     << "| config | page cache | device GiB |";
  for (int len : o.lengths) md << " " << len << " |";
  md << "\n|---|---|---|";
  for (size_t i = 0; i < o.lengths.size(); ++i) md << "---|";
  md << "\n";
  for (const auto& r : out["runs"]) {
    if (r.contains("error")) {
      md << "| " << r["config"].get<std::string>() << " | error: " << r["error"].get<std::string>()
         << " |\n";
      continue;
    }
    for (const char* key : {"ttft_cold", "ttft"}) {
      if (!r.contains(key)) continue;
      md << "| " << r["config"].get<std::string>() << " | "
         << (r.contains("streamed_weights") ? (std::string(key) == "ttft" ? "warm" : "cold") : "-")
         << " | " << absl::StrFormat("%.2f", r["device_bytes"].get<double>() / (1 << 30)) << " |";
      for (const auto& e : r[key]) {
        md << absl::StrFormat(" %.1f (%.1f) |", e["ttft_ms"].get<double>(),
                              e["floor_ms"].get<double>());
      }
      md << "\n";
    }
  }
  md << "\n## ODP vs weight-only prefill on the same resident weights\n\n| config | baseline | "
     << "page cache | speedup at 8K | device memory ratio | crossover (tokens) |\n"
     << "|---|---|---|---|---|---|\n";
  for (const auto& s : out["summary"]) {
    if (!s.contains("page_cache")) continue;  // a policy check, below
    md << "| " << s["config"].get<std::string>() << " | " << s["baseline"].get<std::string>()
       << " | " << s["page_cache"].get<std::string>()
       << absl::StrFormat(" | %.2fx | %.3f | %.0f |\n", s["speedup_vs_wo_at_8k"].get<double>(),
                          s["device_bytes_vs_wo"].get<double>(),
                          s["crossover_tokens_vs_wo"].get<double>());
  }
  for (const auto& s : out["summary"]) {
    if (!s.contains("lengths")) continue;
    md << "\n## Policy: " << s["config"].get<std::string>() << " (calibrated crossover "
       << s["calibrated_crossover_tokens"].dump() << " tokens)\n\n"
       << "| tokens | path taken | ms | resident (" << s["baseline"].get<std::string>()
       << ") ms | streamed ms | faster path |\n"
       << "|---|---|---|---|---|---|\n";
    for (const auto& e : s["lengths"]) {
      md << "| " << e["tokens"].get<int>() << " | " << e["path"].get<std::string>()
         << absl::StrFormat(" | %.1f | %.1f | %.1f | ", e["policy_ms"].get<double>(),
                            e["resident_wo_ms"].get<double>(), e["streamed_ms"].get<double>())
         << e["faster_path"].get<std::string>() << " |\n";
    }
  }
}

int Main(int argc, char** argv) {
  dq::LogToStderr();
  CLI::App app{"dq-bench-odp: TTFT of offloaded disaggregated prefill on a Qwen3-4B shape"};
  Options o;
  app.add_option("--lengths", o.lengths, "prompt lengths");
  app.add_option("--configs", o.configs, "configurations (wo-int2, odp-fp8-disk, ...)");
  app.add_option("--image-dir", o.image_dir, "where the streamed images are written");
  app.add_option("--slots", o.slots, "device slots for streamed layers");
  app.add_option("--repeats", o.repeats, "passes per figure (the fastest counts)");
  app.add_option("--out", o.out, "JSON results (a .md summary is written beside it)");
  app.add_option("--machine", o.machine, "machine description for the results");
  app.add_option("--commit", o.commit, "commit measured");
  app.add_option("--command", o.command, "command line recorded in the results");
  CLI11_PARSE(app, argc, argv);
  const ModelConfig c = Qwen3_4B();
  Links links;
  links.h2d = MeasureH2d();
  std::fprintf(stderr, "dq-bench-odp: pinned H2D %.1f GB/s\n", links.h2d / 1e9);
  nlohmann::json out = {{"model", "Qwen3-4B shape, random weights"},
                        {"machine", o.machine},
                        {"commit", o.commit},
                        {"command", o.command},
                        {"h2d_pinned_bytes_per_second", links.h2d},
                        {"flop_peaks", {{"bf16", kBf16Flops}, {"fp8", kFp8Flops}}},
                        {"runs", nlohmann::json::array()}};
  int failures = 0;
  for (const std::string& name : o.configs) {
    absl::StatusOr<Config> cfg = ParseConfig(name);
    absl::StatusOr<nlohmann::json> r =
        cfg.ok() ? RunConfig(c, *cfg, links, o) : absl::StatusOr<nlohmann::json>(cfg.status());
    if (!r.ok()) {
      std::fprintf(stderr, "  %s: %s\n", name.c_str(), std::string(r.status().message()).c_str());
      out["runs"].push_back({{"config", name}, {"error", std::string(r.status().message())}});
      ++failures;
      continue;
    }
    out["runs"].push_back(*r);
    out["summary"] = Summary(out["runs"], o);
    std::ofstream(o.out) << out.dump(2) << "\n";  // keep what finished if a later run dies
  }
  out["summary"] = Summary(out["runs"], o);
  std::ofstream(o.out) << out.dump(2) << "\n";
  std::string md = o.out;
  if (md.size() > 5 && md.substr(md.size() - 5) == ".json") md.resize(md.size() - 5);
  WriteMarkdown(out, o, md + ".md");
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace dq::odp_bench

int main(int argc, char** argv) { return dq::odp_bench::Main(argc, argv); }
