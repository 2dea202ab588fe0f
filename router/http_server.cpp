#include "router/http_server.h"

#include <chrono>
#include <exception>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "router/auth_and_limits.h"
#include "router/tokenize_endpoint.h"
#include "router/tokenize_request.h"
#include "spdlog/spdlog.h"

namespace dq::router {
namespace {

using ojson = nlohmann::ordered_json;

ApiError NotFound(const HttpRequest& req) {
  return ApiError{404, "invalid_request_error",
                  "Not found: " + req.method + " " + req.path +
                      ". This server serves POST /v1/chat/completions, POST /v1/completions, "
                      "GET /v1/models, GET /v1/models/{id}, POST /tokenize, POST /detokenize, "
                      "GET /health and GET /metrics.",
                  "", "not_found"};
}

ApiError Internal(const std::string& what) {
  // The exception text is for the log; the client only learns that the server failed.
  spdlog::error("HTTP handler failed: {}", what);
  return ApiError{500, "server_error",
                  "The server failed while handling this request; it was logged. Retry, and "
                  "report it if it persists.",
                  "", ""};
}

}  // namespace

HttpServer::HttpServer(HttpServerOptions options, RequestPipeline& pipeline,
                       WorkerRegistry& registry, Scheduler& scheduler)
    : options_(std::move(options)),
      pipeline_(pipeline),
      registry_(registry),
      scheduler_(scheduler),
      listener_(HttpListenerOptions{.host = options_.host,
                                    .port = options_.port,
                                    .max_body_bytes = options_.max_body_bytes,
                                    .handler_threads = options_.threads,
                                    .max_pending_connections = options_.max_pending_connections,
                                    .head_timeout = options_.head_timeout},
                Routes()) {
  parse_options_.served_models = {pipeline_.model().name};
  parse_options_.vocab_size = pipeline_.model().vocab_size;
}

HttpServer::~HttpServer() = default;

const HttpServer::Route* HttpServer::FindRoute(const HttpRequest& req) {
  static constexpr Route kRoutes[] = {
      {"POST", "/v1/chat/completions", &HttpServer::Chat, true, false},
      {"POST", "/v1/completions", &HttpServer::Completions, true, false},
      {"GET", "/v1/models", &HttpServer::Models, true, true},
      {"GET", "/v1/models/", &HttpServer::Model, true, true},  // + {id}: a prefix
      // Rendering a chat can take a while: on a handler thread, not the I/O thread.
      {"POST", "/tokenize", &HttpServer::Tokenize, true, false},
      {"POST", "/detokenize", &HttpServer::Detokenize, true, false},
      {"GET", "/health", &HttpServer::Health, false, true},
      {"GET", "/metrics", &HttpServer::Metrics, true, true},
  };
  for (const Route& r : kRoutes) {
    const std::string_view path(r.path);
    const bool match = path.back() == '/'
                           ? req.path.size() > path.size() &&
                                 std::string_view(req.path).substr(0, path.size()) == path
                           : req.path == path;
    if (req.method == r.method && match) return &r;
  }
  return nullptr;
}

HttpRoutes HttpServer::Routes() {
  HttpRoutes routes;
  routes.check_head = [this](const HttpRequest& head) { return CheckHead(head); };
  routes.runs_inline = [](const HttpRequest& req) {
    const Route* r = FindRoute(req);
    return r != nullptr && r->runs_inline;
  };
  routes.handle = [this](const HttpRequest& req, HttpResponder& res) { Handle(req, res); };
  routes.error_reply = [this](int status, const std::string& message) {
    return ListenerError(status, message);
  };
  return routes;
}

std::optional<HttpReply> HttpServer::CheckHead(const HttpRequest& head) {
  const Route* route = FindRoute(head);
  if (route == nullptr) return ErrorReply(NotFound(head));
  if (route->needs_auth) {
    if (auto e = CheckBearerAuth(head.header("Authorization"), options_.api_keys)) {
      pipeline_.metrics().Count(Outcome::kBadRequest);
      return ErrorReply(*e);
    }
  }
  uint64_t declared = 0;
  if (absl::SimpleAtoi(head.header("Content-Length"), &declared)) {
    if (auto e = CheckBodySize(declared, options_.max_body_bytes)) return ErrorReply(*e);
  }
  return std::nullopt;
}

void HttpServer::Handle(const HttpRequest& req, HttpResponder& res) {
  const Route* route = FindRoute(req);
  try {
    if (route == nullptr) return res.Reply(ErrorReply(NotFound(req)));
    (this->*(route->handler))(req, res);
  } catch (const std::exception& e) {
    res.Reply(ErrorReply(Internal(e.what())));
  } catch (...) {
    res.Reply(ErrorReply(Internal("unknown exception")));
  }
}

int HttpServer::Bind() { return listener_.Bind(); }

bool HttpServer::Serve() { return listener_.Serve(); }

void HttpServer::Stop() { listener_.Stop(); }

HttpReply HttpServer::ErrorReply(const ApiError& error, const std::string& retry_after) {
  HttpReply reply{error.http_status, "application/json", error.ToJson(), {}};
  if (!retry_after.empty()) reply.headers.emplace_back("Retry-After", retry_after);
  return reply;
}

HttpReply HttpServer::ListenerError(int status, const std::string& message) const {
  if (status == 413) {
    return ErrorReply(*CheckBodySize(options_.max_body_bytes + 1, options_.max_body_bytes));
  }
  return ErrorReply(ApiError{status, status >= 500 ? "server_error" : "invalid_request_error",
                             message.empty() ? absl::StrCat("The HTTP request could not be "
                                                            "handled (status ",
                                                            status, ").")
                                             : message,
                             "", status == 431 ? "request_header_too_large" : ""});
}

void HttpServer::BadRequest(HttpResponder& res, const ApiError& error) {
  pipeline_.metrics().Count(Outcome::kBadRequest);
  res.Reply(ErrorReply(error));
}

std::string HttpServer::ModelsJson() const {
  ojson body;
  body["object"] = "list";
  body["data"] = ojson::array({ojson::parse(ModelJson())});
  return body.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string HttpServer::ModelJson() const {
  const ServedModel& m = pipeline_.model();
  ojson model;
  model["id"] = m.name;
  model["object"] = "model";
  model["created"] = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  model["owned_by"] = "dqserve";
  model["root"] = m.path;
  model["max_model_len"] = m.max_context;
  model["dq_prefill_scheme"] = registry_.Scheme(WorkerRole::kPrefill);
  model["dq_decode_scheme"] = registry_.Scheme(WorkerRole::kDecode);
  return model.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string HttpServer::HealthJson(bool* ready) const {
  *ready = registry_.Ready();
  ojson workers = ojson::array();
  ojson down = ojson::array();  // "decode worker 127.0.0.1:7001: <why>", for an operator's eye
  for (const WorkerStatus& w : registry_.Snapshot()) {
    if (!w.live()) {
      down.push_back(absl::StrCat(std::string(WorkerRoleName(w.role)), " worker ", w.address,
                                  w.detail.empty() ? "" : ": ", w.detail));
    }
    ojson j;
    j["role"] = std::string(WorkerRoleName(w.role));
    j["address"] = w.address;
    j["status"] = w.live() ? "serving" : "not_serving";
    if (!w.detail.empty()) j["detail"] = w.detail;
    j["load"] = w.load();
    if (w.handshaken) {
      j["scheme"] = w.identity.checkpoint().scheme();
      j["checkpoint"] = w.identity.checkpoint().path();
    }
    workers.push_back(std::move(j));
  }
  const SchedulerCounters c = scheduler_.counters();
  ojson body;
  // ok: every worker serves; degraded: some do not, but each role has one that does (still
  // 200: requests are routed around); unavailable (503): a role has none.
  body["status"] = !*ready ? "unavailable" : down.empty() ? "ok" : "degraded";
  if (!down.empty()) body["down"] = std::move(down);
  body["model"] = pipeline_.model().name;
  body["requests_running"] = c.in_flight;
  body["requests_queued"] = c.queued;
  body["workers"] = std::move(workers);
  return body.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

void HttpServer::Models(const HttpRequest&, HttpResponder& res) {
  res.Reply(HttpReply{200, "application/json", ModelsJson(), {}});
}

void HttpServer::Model(const HttpRequest& req, HttpResponder& res) {
  const std::string id = req.path.substr(std::string_view("/v1/models/").size());
  if (id != pipeline_.model().name) {
    return res.Reply(ErrorReply(
        ApiError{404, "invalid_request_error",
                 absl::StrCat("The model '", id, "' does not exist; this server serves '",
                              pipeline_.model().name, "' (GET /v1/models lists it)."),
                 "model", "model_not_found"}));
  }
  res.Reply(HttpReply{200, "application/json", ModelJson(), {}});
}

void HttpServer::Tokenize(const HttpRequest& req, HttpResponder& res) {
  if (auto e = CheckBodySize(req.body.size(), options_.max_body_bytes)) return BadRequest(res, *e);
  ApiResult<TokenizeRequest> request = ParseTokenizeRequest(req.body, parse_options_);
  if (!request.ok()) return BadRequest(res, request.error());
  ApiResult<std::string> body = TokenizeJson(*request, pipeline_.model());
  if (!body.ok()) return BadRequest(res, body.error());
  res.Reply(HttpReply{200, "application/json", std::move(body).value(), {}});
}

void HttpServer::Detokenize(const HttpRequest& req, HttpResponder& res) {
  if (auto e = CheckBodySize(req.body.size(), options_.max_body_bytes)) return BadRequest(res, *e);
  ApiResult<DetokenizeRequest> request = ParseDetokenizeRequest(req.body, parse_options_);
  if (!request.ok()) return BadRequest(res, request.error());
  res.Reply(HttpReply{200, "application/json", DetokenizeJson(*request, pipeline_.model()), {}});
}

void HttpServer::Health(const HttpRequest&, HttpResponder& res) {
  bool ready = false;
  std::string body = HealthJson(&ready);
  res.Reply(HttpReply{ready ? 200 : 503, "application/json", std::move(body), {}});
}

void HttpServer::Metrics(const HttpRequest&, HttpResponder& res) {
  const std::vector<WorkerStatus> workers = registry_.Snapshot();
  res.Reply(HttpReply{200,
                      "text/plain; version=0.0.4; charset=utf-8",
                      RenderMetrics(pipeline_.metrics(), scheduler_.counters(), workers),
                      {}});
}

}  // namespace dq::router
