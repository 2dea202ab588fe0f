// The OpenAI-compatible HTTP front end (on http_listener.h):
//   POST /v1/chat/completions, POST /v1/completions  (stream via SSE, or one JSON body)
//   GET  /v1/models   GET /v1/models/{id}   GET /health (no API key)   GET /metrics (Prometheus)
//   POST /tokenize   POST /detokenize  (vLLM's, for clients that need the server's tokenizer)
// Every error is an OpenAI-style JSON body; a handler never lets an exception reach the
// listener. The key, the path and the declared length are checked before a body is read. A
// request whose client disconnects is cancelled on both workers at its next token (a stream: at
// the next write).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "router/http_listener.h"
#include "router/http_message.h"
#include "router/openai_request.h"
#include "router/request_pipeline.h"
#include "router/router_metrics.h"
#include "router/scheduler.h"
#include "router/worker_registry.h"

namespace dq::router {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                    // 0: any free port (see Bind)
  std::vector<std::string> api_keys;  // empty: no authentication
  size_t max_body_bytes = 1 << 20;
  // Handler threads: each streamed or queued request holds one for its whole life, so this
  // bounds (running + queued) generation requests, not CPU use. Health, metrics and models are
  // answered on the I/O thread and need none.
  int threads = 64;
  // Connections that have not sent a whole request (slow or idle clients) beyond which new ones
  // are refused, and how long a request's head may take to arrive.
  int max_pending_connections = 256;
  std::chrono::milliseconds head_timeout{30000};
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
  // The served model's object (GET /v1/models/{id}, and each entry of the list).
  std::string ModelJson() const;
  // Sets *ready to whether at least one prefill and one decode worker serve.
  std::string HealthJson(bool* ready) const;

 private:
  using Handler = void (HttpServer::*)(const HttpRequest& req, HttpResponder& res);
  struct Route {
    const char* method;
    const char* path;
    Handler handler;
    bool needs_auth;
    bool runs_inline;  // answers at once: on the listener's I/O thread
  };
  static const Route* FindRoute(const HttpRequest& req);
  HttpRoutes Routes();
  // The key, the route and the declared body length, before the body is read.
  std::optional<HttpReply> CheckHead(const HttpRequest& head);
  void Handle(const HttpRequest& req, HttpResponder& res);
  void Chat(const HttpRequest& req, HttpResponder& res);
  void Completions(const HttpRequest& req, HttpResponder& res);
  void Models(const HttpRequest& req, HttpResponder& res);
  void Tokenize(const HttpRequest& req, HttpResponder& res);
  void Detokenize(const HttpRequest& req, HttpResponder& res);
  void Model(const HttpRequest& req, HttpResponder& res);
  void Health(const HttpRequest& req, HttpResponder& res);
  void Metrics(const HttpRequest& req, HttpResponder& res);
  static HttpReply ErrorReply(const ApiError& error, const std::string& retry_after = "");
  // The listener's own refusals (malformed request, limits, busy) as OpenAI-style bodies.
  HttpReply ListenerError(int status, const std::string& message) const;
  void BadRequest(HttpResponder& res, const ApiError& error);

  const HttpServerOptions options_;
  RequestPipeline& pipeline_;
  WorkerRegistry& registry_;
  Scheduler& scheduler_;
  ParseOptions parse_options_;
  HttpListener listener_;
};

}  // namespace dq::router
