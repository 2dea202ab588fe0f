// dq-prefill: the prefill worker. Loads one model in its prefill compute mode, serves
// dqserve.v1.PrefillWorker over gRPC, and writes each prompt's KV into the decode worker's lease.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/cpu_matmul.h"
#include "common/device_spec.h"
#include "common/logging.h"
#include "common/worker_key.h"
#include "prefill_worker/prefill_server.h"
#include "worker_common/drafter_weights.h"
#include "worker_common/phase_model.h"

namespace {

struct Flags {
  dq::worker::PhaseModelOptions model;
  dq::prefill::PrefillServerOptions server;
  std::string transports = "tcp";
  int kv_capacity = 0;
  std::string log_level = "info";
  std::string odp_source = "disk";
  std::string odp_image_dir;
  std::string speculative;  // empty: self when drafter weights are given
  std::string attention = "bf16";
};

// --speculative against the drafter flags; an error message, or empty.
std::string ResolveDrafter(Flags& f) {
  if (f.speculative.empty()) f.speculative = f.server.drafter.enabled() ? "self" : "none";
  if (f.speculative == "none") {
    if (f.server.drafter.enabled()) {
      return "--draft-format/--draft-weights give a drafter; drop them or name it with "
             "--speculative self|dflash";
    }
    return "";
  }
  if (!f.server.drafter.enabled()) {
    return "--speculative " + f.speculative +
           " needs the decode worker's drafter flags (--draft-format or --draft-weights)";
  }
  f.server.drafter_kind = f.speculative;
  return "";
}

void AddFlags(CLI::App& app, Flags& f) {
  app.add_option("--model", f.model.model, "model: a .gguf file or a HF checkpoint directory")
      ->required();
  app.add_option("--weights", f.model.weights,
                 "this phase's own checkpoint (full disaggregation); default: the model's");
  app.add_option("--compute", f.model.compute, "how to compute: weight_only, w8a8 or w4a4")
      ->check(CLI::IsMember({"weight_only", "w8a8", "w4a4"}))
      ->capture_default_str();
  app.add_option("--host", f.server.host, "address to serve gRPC on (loopback by default)")
      ->capture_default_str();
  app.add_option("--port", f.server.port, "gRPC port")->required()->check(CLI::Range(1, 65535));
  app.add_option("--transports", f.transports,
                 "KV transports, comma-separated: tcp, ucx, nccl (GPU to GPU), local")
      ->capture_default_str();
  app.add_option("--token-budget", f.server.token_budget,
                 "most prompt tokens per forward pass; longer prompts are chunked")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--prefix-cache", f.server.prefix_cache,
               "keep finished prompts' full KV blocks in the local pool (evicted least recently "
               "used first) and compute only what a later prompt does not share with them");
  app.add_option("--kv-capacity", f.kv_capacity,
                 "local KV pool size in tokens (default: 2 x context, at least the budget)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--threads", f.model.threads, "compute threads (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--state-slots", f.model.state_slots,
                 "a hybrid model's recurrent state slots: prompts prefilled at once (0: 16)")
      ->check(CLI::Range(0, 65536));
  app.add_option("--device", f.model.device,
                 "where to compute and keep the KV cache: cpu, cuda or cuda:N (a CUDA build)")
      ->check(CLI::Validator(
          [](std::string& v) {
            auto d = dq::ParseDeviceSpec(v);
            return d.ok() ? std::string() : std::string(d.status().message());
          },
          "cpu|cuda|cuda:N"))
      ->capture_default_str();
  app.add_option("--attention", f.attention,
                 "prefill attention: bf16, or fp8 (e4m3 Q/K/V/P; --compute w8a8; emulated on "
                 "the CPU; changes numerics slightly, docs/serving.md)")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str();
  app.add_option("--cpu-matmul", f.model.cpu_matmul, dq::kCpuMatmulHelp)
      ->check(CLI::IsMember(
          std::vector<std::string>(dq::kCpuMatmulModes.begin(), dq::kCpuMatmulModes.end())))
      ->capture_default_str();
  app.add_option("--cuda-kernels", f.model.cuda_kernels,
                 "GPU kernel choices as key=value pairs (docs/serving.md, Kernel options)");
  // Offloaded disaggregated prefill (docs/odp.md): on a GPU shared with the decode worker.
  app.add_option("--odp-resident-weights", f.model.odp_resident_weights,
                 "ODP: keep this (decode) checkpoint resident for short prompts and stream "
                 "--weights layer by layer for long ones");
  app.add_option("--odp-crossover", f.model.odp.crossover_tokens,
                 "ODP: prompts of this many tokens or more stream (0: measure at start-up)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--odp-slots", f.model.odp.slots, "ODP: device slots for streamed layers")
      ->check(CLI::Range(2, 64));
  app.add_option("--odp-source", f.odp_source, "ODP: disk (an image file) or host (pinned)")
      ->check(CLI::IsMember({"disk", "host"}));
  app.add_option("--odp-image-dir", f.odp_image_dir,
                 "ODP: where the image file is written (default: the temp folder)");
  // The drafter (docs/speculative.md): give the decode worker's drafter flags to compute and
  // ship its prompt KV here too.
  app.add_option("--speculative", f.speculative,
                 "the decode worker's drafter whose prompt KV this worker ships: self (the "
                 "default with --draft-format/--draft-weights) or dflash (--draft-weights DIR; "
                 "--device cpu); none: ship no drafter KV")
      ->check(CLI::IsMember({"none", "self", "dflash"}));
  app.add_option("--draft-format", f.server.drafter.format,
                 "self drafter: quantize the model to this format (as the decode worker's "
                 "--draft-format) and ship the drafter's prompt KV with the target's");
  app.add_option("--draft-group-size", f.server.drafter.group_size,
                 "self drafter: intN group size (0: the format's default)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--draft-weights", f.server.drafter.weights,
                 "self drafter: a checkpoint of its own (as the decode worker's --draft-weights); "
                 "dflash: the DFlash drafter's directory");
  app.add_option("--io-timeout-ms", f.server.io_timeout_ms,
                 "how long a KV transfer may make no progress before it fails")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = std::min(s.find(',', start), s.size());
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

int Run(Flags& f) {
  if (const std::string bad = ResolveDrafter(f); !bad.empty()) {
    spdlog::error("dq-prefill: {}", bad);
    return 2;
  }
  f.server.worker_key = dq::WorkerKeyFromEnv();
  // Before any weight is read.
  f.model.fp8_attention = f.attention == "fp8";
  if (const absl::Status bad = dq::worker::CheckFp8Attention(f.model); !bad.ok()) {
    spdlog::error("dq-prefill: {}", std::string(bad.message()));
    return 2;
  }
  f.server.transports = SplitList(f.transports);
  // The pool: the flag, or twice the model's context (so one context-long prompt can be
  // prefilled while the next one starts); never below the token budget.
  if (f.kv_capacity > 0) {
    f.model.kv_capacity_tokens = std::max(f.kv_capacity, f.server.token_budget);
  } else {
    f.model.kv_capacity_contexts = 2;
    f.model.min_kv_tokens = f.server.token_budget;
  }
  // A device backend sizes its scratch for one iteration (at least its default, 8192 tokens),
  // and replays no CUDA graphs: a replayed step (what a batch of one-token chunks looks like)
  // calls no per-layer KV hook.
  f.model.max_batch_tokens = std::max(f.server.token_budget, 8192);
  f.model.device_graphs = false;
  if (!f.model.odp_resident_weights.empty()) {
    f.model.odp.enabled = true;
    f.model.odp.pinned_host = f.odp_source == "host";
    const std::filesystem::path dir = f.odp_image_dir.empty()
                                          ? std::filesystem::temp_directory_path()
                                          : std::filesystem::path(f.odp_image_dir);
    f.model.odp.image_path =
        (dir / ("dq-odp-prefill-" + std::to_string(::getpid()) + ".img")).string();
  }
  auto model = dq::worker::LoadPhaseModel(f.model);
  if (!model.ok()) {
    spdlog::error("dq-prefill: {}", model.status().ToString());
    return 1;
  }
  // Handle SIGINT/SIGTERM synchronously below: block them before any thread starts, so that
  // every thread inherits the mask and sigwait here is the only receiver.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const dq::KvCacheOptions& kv = (*model)->runner->kv_pool().options();
  const int64_t pool_tokens = int64_t{kv.num_blocks} * kv.block_size;
  const std::string device = (*model)->device.name();
  // How the KV leaves: nccl reads the device cache itself; the host transports of a GPU worker
  // go through pinned host staging.
  std::string kv_path;
  for (const std::string& t : f.server.transports) {
    if (t == "nccl") {
      kv_path += " (nccl straight from device blocks)";
    } else if ((*model)->kv_staging->staged() && kv_path.find("staging") == std::string::npos) {
      kv_path += " through pinned host staging";
    }
  }
  f.server.drafter_threads = f.model.threads;
  auto server = dq::prefill::PrefillServer::Start(std::move(*model), f.server);
  if (!server.ok()) {
    spdlog::error("dq-prefill: {}", server.status().ToString());
    return 1;
  }
  const auto id = (*server)->identity();
  spdlog::info(
      "dq-prefill: {} ({}, {} {}) on {}, KV layout {} layers x {} kv heads x {} dims {} "
      "block {}, pool {} tokens, transports {}{}, token budget {}, {}",
      id.checkpoint().path(), id.checkpoint().format(), id.checkpoint().scheme(),
      id.kv_layout().architecture(), device, id.kv_layout().num_layers(),
      id.kv_layout().num_kv_heads(), id.kv_layout().head_dim(), id.kv_layout().kv_dtype(),
      id.kv_layout().block_size(), pool_tokens, absl::StrJoin(id.transports(), ","), kv_path,
      f.server.token_budget, id.version());
  if (f.model.fp8_attention) {
    spdlog::info("dq-prefill: prefill attention in FP8 (e4m3 Q/K/V/P){}",
                 device == "cpu" ? ", emulated on the CPU" : "");
  }
  spdlog::info("dq-prefill: serving on {}", (*server)->address());
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("dq-prefill: {} received, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  (*server)->Shutdown();
  spdlog::info("dq-prefill: stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  dq::LogToStderr();
  CLI::App app{"dq-prefill: the dqserve prefill worker"};
  Flags flags;
  AddFlags(app, flags);
  CLI11_PARSE(app, argc, argv);
  dq::SetLogLevel(flags.log_level);
  return Run(flags);
}
