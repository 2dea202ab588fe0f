// dq-decode: the decode worker. Loads the decode phase's weights, leases KV blocks to prefill
// workers and streams the decode of committed requests over gRPC (dqserve.v1.DecodeWorker).
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>

#include "common/cpu_matmul.h"
#include "common/device_spec.h"
#include "common/lm_head_format.h"
#include "common/logging.h"
#include "common/worker_key.h"
#include "decode_worker/decode_server.h"
#include "worker_common/drafter_weights.h"
#include "worker_common/phase_model.h"
#include "worker_common/worker_identity.h"

namespace {

struct Flags {
  dq::worker::PhaseModelOptions model;
  dq::decode::DecodeServerOptions server;
  std::string log_level = "info";
};

CLI::Validator DeviceValidator() {
  return CLI::Validator(
      [](std::string& v) {
        auto d = dq::ParseDeviceSpec(v);
        return d.ok() ? std::string() : std::string(d.status().message());
      },
      "cpu|cuda|cuda:N");
}

void AddFlags(CLI::App& app, Flags& f) {
  app.add_option("--model", f.model.model, "model: a .gguf file or a HF checkpoint directory")
      ->required();
  app.add_option("--weights", f.model.weights,
                 "the decode phase's own checkpoint (default: the model's weights)");
  app.add_option("--compute", f.model.compute, "how to compute with the weights")
      ->check(CLI::IsMember({"weight_only", "w8a8", "w4a4"}));
  app.add_option("--host", f.server.host, "gRPC listen address (loopback by default)");
  app.add_option("--port", f.server.port, "gRPC listen port")
      ->required()
      ->check(CLI::Range(1, 65535));
  app.add_option("--transport", f.server.transport, "the KV transport prefill workers write with")
      ->check(CLI::IsMember({"tcp", "ucx", "nccl"}));
  app.add_option("--transfer-host", f.server.transfer_host,
                 "address the KV transport listens on and advertises");
  app.add_option("--max-batch", f.server.max_batch, "sequences per decode step")
      ->check(CLI::Range(1, 1024));
  app.add_option("--kv-capacity", f.model.kv_capacity_tokens, "KV pool size in tokens")
      ->check(CLI::Range(1, 1 << 26));
  app.add_option("--lease-ttl-ms", f.server.lease_ttl_ms,
                 "how long a reserved lease waits for its commit before it is reclaimed")
      ->check(CLI::Range(1, 3600 * 1000));
  app.add_option("--threads", f.model.threads, "compute threads (0: all)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--state-slots", f.model.state_slots,
                 "a hybrid model's recurrent state slots: leases held at once (0: 16)")
      ->check(CLI::Range(0, 65536));
  app.add_option("--device", f.model.device,
                 "where to compute and keep the KV cache: cpu, cuda or cuda:N (a CUDA build)")
      ->check(DeviceValidator());
  app.add_flag(
      "--batch-invariant", f.model.batch_invariant,
      "GPU: each sequence's decode step independent of its batch-mates (greedy output then "
      "does not depend on the batch; speculative decoding equals plain decoding bit for "
      "bit); slower at larger batches");
  app.add_flag("--prefix-cache", f.server.prefix_cache,
               "keep finished requests' full KV blocks; a later prompt that starts with them "
               "leases them instead of receiving them again (docs/serving.md, Prefix caching)");
  app.add_option("--assistant-kv", f.server.assistant_kv,
                 "with --prefix-cache: reuse (keep the answer's KV too, so a next turn reuses "
                 "what decode wrote) or reprefill (keep the prompt's only)")
      ->check(CLI::IsMember({"reuse", "reprefill"}))
      ->capture_default_str();
  app.add_option("--lm-head", f.model.lm_head,
                 "the lm_head's format: bf16 (the checkpoint's own) or a weight-only scheme it "
                 "is quantized to at load, int8, int4, int3, int2 or nvfp4 (docs/fidelity.md)")
      ->check(CLI::IsMember(
          std::vector<std::string>(dq::kLmHeadFormats.begin(), dq::kLmHeadFormats.end())))
      ->capture_default_str();
  app.add_option("--cpu-matmul", f.model.cpu_matmul, dq::kCpuMatmulHelp)
      ->check(CLI::IsMember(
          std::vector<std::string>(dq::kCpuMatmulModes.begin(), dq::kCpuMatmulModes.end())))
      ->capture_default_str();
  app.add_option("--cuda-kernels", f.model.cuda_kernels,
                 "GPU kernel choices as key=value pairs (docs/serving.md, Kernel options)");
  app.add_option("--speculative", f.server.speculative,
                 "speculative decoding: none (default), ngram (prompt lookup, no weights), self "
                 "(the model on cheaper weights: --draft-format or --draft-weights) or dflash "
                 "(a DFlash block drafter: --draft-weights DIR; --device cpu)")
      ->check(CLI::IsMember({"none", "ngram", "self", "dflash"}));
  app.add_option("--draft-format", f.server.drafter.format,
                 "self drafter: quantize the model to this format at load (int2, lut2, int4, "
                 "int8, bf16...); give the prefill worker the same to ship its prompt KV");
  app.add_option("--draft-group-size", f.server.drafter.group_size,
                 "self drafter: intN group size (0: the format's default)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--draft-weights", f.server.drafter.weights,
                 "self drafter: a checkpoint of its own (sharing the model's tokenizer); dflash: "
                 "the DFlash drafter's directory (made for this model)");
  app.add_option("--spec-k", f.server.spec_k,
                 "tokens drafted per step (at most; adaptive below), 1..16")
      ->check(CLI::Range(1, 16));
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error, off");
}

void LogIdentity(const dqserve::v1::WorkerIdentity& id) {
  const auto& c = id.checkpoint();
  const auto& l = id.kv_layout();
  spdlog::info("dq-decode: {} | checkpoint {} ({}, {}, {} bytes)", id.version(), c.path(),
               c.format(), c.scheme(), c.size_bytes());
  spdlog::info("dq-decode: KV layout {} layers={} kv_heads={} head_dim={} dtype={} block={}",
               l.architecture(), l.num_layers(), l.num_kv_heads(), l.head_dim(), l.kv_dtype(),
               l.block_size());
}

}  // namespace

int main(int argc, char** argv) {
  dq::LogToStderr();
  CLI::App app{"dq-decode: dqserve decode worker"};
  Flags f;
  f.model.kv_capacity_tokens = 16384;
  AddFlags(app, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  dq::SetLogLevel(f.log_level);

  // Every thread started from here on inherits the mask, so only sigwait below sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto model = dq::worker::LoadPhaseModel(f.model);
  if (!model.ok()) {
    std::fprintf(stderr, "dq-decode: %s\n", model.status().ToString().c_str());
    return 1;
  }
  f.server.threads = f.model.threads;
  f.server.worker_key = dq::WorkerKeyFromEnv();
  auto server = dq::decode::DecodeServer::Start(**model, f.server);
  if (!server.ok()) {
    std::fprintf(stderr, "dq-decode: %s\n", server.status().ToString().c_str());
    return 1;
  }
  LogIdentity((*server)->identity());
  spdlog::info(
      "dq-decode: serving on {} (device {}, KV transport {}{}, max batch {}, {} KV blocks)",
      (*server)->address(), (*model)->device.name(), f.server.transport,
      f.server.transport == "nccl"     ? " straight into device blocks"
      : (*model)->kv_staging->staged() ? " through pinned host staging"
                                       : "",
      f.server.max_batch, (*server)->leases().stats().total_blocks);
  if (f.server.speculative != "none") {
    spdlog::info("dq-decode: speculative decoding with the {} drafter, up to {} tokens per step",
                 f.server.speculative, f.server.spec_k);
  }
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("dq-decode: {} received, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  (*server)->Shutdown(std::chrono::milliseconds(2000));
  return 0;
}
