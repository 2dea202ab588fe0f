// The OpenAI-compatible HTTP front end (cpp-httplib):
//   POST /v1/chat/completions, POST /v1/completions  (stream via SSE, or one JSON body)
//   GET  /v1/models   GET /health (no API key)   GET /metrics (Prometheus text)
// Every error is an OpenAI-style JSON body; a handler never lets an exception reach httplib.
// A streamed request whose client disconnects is cancelled on both workers at the next write.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "router/openai_request.h"
#include "router/request_pipeline.h"
#include "router/router_metrics.h"
#include "router/scheduler.h"
#include "router/worker_registry.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace dq::router {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                    // 0: any free port (see Bind)
  std::vector<std::string> api_keys;  // empty: no authentication
  size_t max_body_bytes = 1 << 20;
  // Worker threads: each streamed or queued request holds one for its whole life, so this
  // bounds (running + queued + other) requests, not CPU use.
  int threads = 64;
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, RequestPipeline& pipeline, WorkerRegistry& registry,
             Scheduler& scheduler);
  ~HttpServer();

  // Binds the listening socket; returns the port (useful with port 0) or -1.
  int Bind();
  // Serves until Stop(); false when serving failed.
  bool Serve();
  void Stop();

  // The bodies of GET /v1/models and GET /health (the gRPC front end reports the same facts).
  std::string ModelsJson() const;
  // Sets *ready to whether at least one prefill and one decode worker serve.
  std::string HealthJson(bool* ready) const;

 private:
  using Handler = void (HttpServer::*)(const httplib::Request&, httplib::Response&);
  void Route(const char* method, const char* path, Handler handler, bool needs_auth);
  // Admits a parsed, tokenized request (named `request_id`) through the pipeline; on any error
  // the reply is written to `res` and the result is null.
  std::shared_ptr<ActiveRequest> Start(ApiResult<GenerationInput> input,
                                       const std::string& request_id, httplib::Response& res);
  void Chat(const httplib::Request& req, httplib::Response& res);
  void Completions(const httplib::Request& req, httplib::Response& res);
  void Models(const httplib::Request& req, httplib::Response& res);
  void Health(const httplib::Request& req, httplib::Response& res);
  void Metrics(const httplib::Request& req, httplib::Response& res);
  void ReplyError(httplib::Response& res, const ApiError& error,
                  const std::string& retry_after = "");
  void BadRequest(httplib::Response& res, const ApiError& error);

  const HttpServerOptions options_;
  RequestPipeline& pipeline_;
  WorkerRegistry& registry_;
  Scheduler& scheduler_;
  ParseOptions parse_options_;
  std::unique_ptr<httplib::Server> server_;
};

}  // namespace dq::router
