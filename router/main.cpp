// dq-router: the OpenAI-compatible HTTP front end and public gRPC API of a disaggregated
// deployment. Each request is tokenized here, prefilled on a prefill worker straight into KV
// blocks leased from a decode worker, and streamed back from that decode worker.
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "common/listen_port.h"
#include "common/logging.h"
#include "common/worker_key.h"
#include "common/worker_tls.h"
#include "router/grpc_frontend.h"
#include "router/http_server.h"
#include "router/request_pipeline.h"
#include "router/router_metrics.h"
#include "router/scheduler.h"
#include "router/served_model.h"
#include "router/worker_registry.h"
#include "spdlog/spdlog.h"

namespace {

struct Flags {
  std::string host = "127.0.0.1";
  int port = 8000;
  int grpc_port = 0;
  std::string model;
  std::string served_model_name;
  std::vector<std::string> prefill;
  std::vector<std::string> decode;
  std::string api_key;
  int max_in_flight = 4;
  int max_queue = 16;
  int queue_timeout_ms = 30000;
  int request_timeout_ms = 600000;
  size_t max_body_bytes = 1 << 20;
  int health_interval_ms = 1000;
  int http_threads = 64;
  std::string log_level = "info";
  bool special_tokens_in_content = false;
  std::string tool_call_parser = "auto";
};

void AddFlags(CLI::App& app, Flags& f) {
  app.add_option("--host", f.host, "Address to listen on (HTTP and gRPC)");
  app.add_option("--port", f.port, "HTTP port (0: any free port)")->check(CLI::Range(0, 65535));
  app.add_option("--grpc-port", f.grpc_port, "gRPC DqServe port (0: off)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--model", f.model, "Model directory or .gguf (tokenizer, chat template, context)")
      ->required();
  app.add_option("--served-model-name", f.served_model_name,
                 "Name clients use (default: the model path's stem)");
  app.add_option("--prefill", f.prefill, "Prefill worker host:port (repeatable)");
  app.add_option("--decode", f.decode, "Decode worker host:port (repeatable)");
  app.add_option("--api-key", f.api_key,
                 "Required Bearer key (default: env DQ_API_KEY; none: off)");
  app.add_option("--max-in-flight", f.max_in_flight, "Requests running at once")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-queue", f.max_queue, "Requests waiting for admission before 429")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--queue-timeout-ms", f.queue_timeout_ms, "Longest wait for admission")
      ->check(CLI::PositiveNumber);
  app.add_option("--request-timeout-ms", f.request_timeout_ms, "Deadline of a whole request")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-body-bytes", f.max_body_bytes, "Largest request body (413 beyond)")
      ->check(CLI::PositiveNumber);
  app.add_option("--health-interval-ms", f.health_interval_ms, "Worker health probe period")
      ->check(CLI::PositiveNumber);
  app.add_option("--http-threads", f.http_threads, "HTTP worker threads (streams hold one each)")
      ->check(CLI::PositiveNumber);
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error, off");
  app.add_flag("--special-tokens-in-content", f.special_tokens_in_content,
               "Parse special tokens (<|im_start|>, ...) written inside chat message content; "
               "for trusted callers only: anyone else can forge turns and roles with them");
  app.add_option("--tool-call-parser", f.tool_call_parser,
                 "How tool calls are read from the model's output: auto (from the chat "
                 "template), hermes, llama3_json, mistral, or none (requests with tools get 400)")
      ->check(CLI::IsMember({"auto", "hermes", "llama3_json", "mistral", "none"}));
}

// --tool-call-parser over the format the chat template implies.
void ApplyToolCallParser(const std::string& flag, dq::router::ServedModel& model) {
  if (flag == "none") {
    model.SetToolCallFormat(std::nullopt);
  } else if (flag != "auto") {
    model.SetToolCallFormat(*dq::router::ToolCallFormatNamed(flag));  // checked by IsMember
  }
  if (model.tool_call_format) {
    spdlog::info("dq-router: tool calls read as {} ({} marker token(s) kept)",
                 dq::router::ToolCallFormatName(*model.tool_call_format),
                 model.tool_marker_ids.size());
  } else {
    spdlog::info(
        "dq-router: no tool-call format (requests with tools get 400; see --tool-call-parser)");
  }
}

// Blocks SIGINT/SIGTERM in every thread (call before starting any) so one thread can sigwait.
sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

int Run(const Flags& f) {
  const sigset_t stop_signals = BlockStopSignals();
  absl::StatusOr<dq::router::ServedModel> model =
      dq::router::ServedModel::Load(f.model, f.served_model_name);
  if (!model.ok()) {
    spdlog::error("dq-router: {}", model.status().ToString());
    return 1;
  }
  model->parse_special_in_content = f.special_tokens_in_content;
  ApplyToolCallParser(f.tool_call_parser, *model);
  spdlog::info("dq-router: model '{}' from {} (context {} tokens, vocabulary {})", model->name,
               model->path, model->max_context, model->vocab_size);
  if (f.prefill.empty() || f.decode.empty()) {
    spdlog::warn(
        "dq-router: no {} workers given; requests fail with 503 until started with "
        "--prefill/--decode",
        f.prefill.empty() ? "prefill" : "decode");
  }
  std::vector<std::string> api_keys;
  if (!f.api_key.empty()) {
    api_keys.push_back(f.api_key);
  } else if (const char* env = std::getenv("DQ_API_KEY"); env != nullptr && *env != '\0') {
    api_keys.push_back(env);
  }

  dq::router::WorkerRegistryOptions ro;
  ro.prefill_addresses = f.prefill;
  ro.decode_addresses = f.decode;
  ro.health_interval = std::chrono::milliseconds(f.health_interval_ms);
  ro.caller = "dq-router@" + f.host + ":" + std::to_string(f.port);
  ro.worker_key = dq::WorkerKeyFromEnv();
  absl::StatusOr<dq::WorkerTlsClient> tls = dq::WorkerTlsClientFromEnv();
  if (!tls.ok()) {
    std::fprintf(stderr, "dq-router: %s\n", std::string(tls.status().message()).c_str());
    return 2;
  }
  ro.tls = std::move(*tls);
  if (ro.tls.enabled()) {
    spdlog::info("dq-router: calls workers over TLS, trusting {} for the name '{}'",
                 std::getenv(dq::kWorkerTlsCaEnv), ro.tls.name);
  } else if (!ro.worker_key.empty()) {
    spdlog::warn("dq-router: the worker key travels in clear text; set {} (docs/deploy.md)",
                 dq::kWorkerTlsCaEnv);
  }
  dq::router::WorkerRegistry registry(ro);
  dq::router::Scheduler scheduler(dq::router::SchedulerOptions{
      f.max_in_flight, f.max_queue, std::chrono::milliseconds(f.queue_timeout_ms)});
  dq::router::RouterMetrics metrics;
  dq::router::PipelineOptions po;
  po.request_timeout = std::chrono::milliseconds(f.request_timeout_ms);
  po.queue_timeout = std::chrono::milliseconds(f.queue_timeout_ms);
  dq::router::RequestPipeline pipeline(po, *model, scheduler, registry, metrics);
  registry.SetDownCallback(
      [&pipeline](dq::router::WorkerRole role, const std::string& address,
                  const std::string& reason) { pipeline.FailRequestsOn(role, address, reason); });
  registry.Start();

  dq::router::HttpServerOptions ho;
  ho.host = f.host;
  ho.port = f.port;
  ho.api_keys = api_keys;
  ho.max_body_bytes = f.max_body_bytes;
  ho.threads = f.http_threads;
  dq::router::HttpServer http(ho, pipeline, registry, scheduler);
  std::unique_ptr<dq::router::GrpcFrontend> grpc_frontend;
  if (f.grpc_port != 0) {
    grpc_frontend = std::make_unique<dq::router::GrpcFrontend>(
        dq::router::GrpcFrontendOptions{f.host, f.grpc_port, api_keys}, pipeline, registry);
    if (!grpc_frontend->Start()) return 1;
  }
  const int port = http.Bind();
  if (port < 0) {
    const absl::Status why = dq::ProbeListen(f.host, f.port);
    spdlog::error("dq-router: cannot serve HTTP on {}:{}: {}", f.host, f.port,
                  why.ok() ? std::string("the bind failed") : std::string(why.message()));
    return 1;
  }

  std::thread signals([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    spdlog::info("dq-router: signal {} received, stopping", sig);
    // Running streams end (finish_reason "abort") so that the HTTP threads can be joined.
    pipeline.Close();
    http.Stop();
  });
  spdlog::info("dq-router: serving on http://{}:{}", f.host, port);
  const bool served = http.Serve();
  int code = 0;
  if (!served) {
    spdlog::error("dq-router: the HTTP server stopped unexpectedly");
    code = 1;
    pthread_kill(signals.native_handle(), SIGTERM);  // ends the sigwait above
  }
  signals.join();
  if (grpc_frontend) grpc_frontend->Shutdown();
  registry.Stop();
  spdlog::info("dq-router: stopped");
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  dq::LogToStderr();
  CLI::App app{"dq-router: OpenAI-compatible front end of a disaggregated dqserve deployment"};
  Flags flags;
  AddFlags(app, flags);
  CLI11_PARSE(app, argc, argv);
  dq::SetLogLevel(flags.log_level);
  return Run(flags);
}
