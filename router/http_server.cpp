#include "router/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <exception>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "router/auth_and_limits.h"
#include "spdlog/spdlog.h"

namespace dq::router {
namespace {

using ojson = nlohmann::ordered_json;

ApiError NotFound(const httplib::Request& req) {
  return ApiError{404, "invalid_request_error",
                  "Not found: " + req.method + " " + req.path +
                      ". This server serves POST /v1/chat/completions, POST /v1/completions, "
                      "GET /v1/models, GET /health and GET /metrics.",
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
      server_(std::make_unique<httplib::Server>()) {
  parse_options_.served_models = {pipeline_.model().name};
  parse_options_.vocab_size = pipeline_.model().vocab_size;

  const int threads = options_.threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(options_.max_body_bytes);
  server_->set_exception_handler(
      [this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        ReplyError(res, Internal(what));
      });
  // httplib answers some requests itself (unknown path, body over the limit) with an empty
  // body; give them OpenAI-style bodies too.
  server_->set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        const int status = res.status;
        if (status == 404) {
          ReplyError(res, NotFound(req));
        } else if (status == 413) {
          ReplyError(res, *CheckBodySize(options_.max_body_bytes + 1, options_.max_body_bytes));
        } else {
          ReplyError(res, ApiError{status, status >= 500 ? "server_error" : "invalid_request_error",
                                   "The HTTP request could not be handled (status " +
                                       std::to_string(status) + ").",
                                   "", ""});
        }
        res.status = status;
        return httplib::Server::HandlerResponse::Handled;
      }));

  Route("POST", "/v1/chat/completions", &HttpServer::Chat, true);
  Route("POST", "/v1/completions", &HttpServer::Completions, true);
  Route("GET", "/v1/models", &HttpServer::Models, true);
  Route("GET", "/health", &HttpServer::Health, false);
  Route("GET", "/metrics", &HttpServer::Metrics, true);
}

HttpServer::~HttpServer() = default;

void HttpServer::Route(const char* method, const char* path, Handler handler, bool needs_auth) {
  auto wrapped = [this, handler, needs_auth](const httplib::Request& req, httplib::Response& res) {
    try {
      if (needs_auth) {
        if (auto e = CheckBearerAuth(req.get_header_value("Authorization"), options_.api_keys)) {
          return BadRequest(res, *e);
        }
      }
      (this->*handler)(req, res);
    } catch (const std::exception& e) {
      ReplyError(res, Internal(e.what()));
    } catch (...) {
      ReplyError(res, Internal("unknown exception"));
    }
  };
  if (std::string_view(method) == "POST") {
    server_->Post(path, wrapped);
  } else {
    server_->Get(path, wrapped);
  }
}

int HttpServer::Bind() {
  // Exclusive: cpp-httplib's default adds SO_REUSEPORT, with which a second router on the same
  // port starts and silently shares it.
  server_->set_socket_options([](auto sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  if (options_.port == 0) return server_->bind_to_any_port(options_.host);
  return server_->bind_to_port(options_.host, options_.port) ? options_.port : -1;
}

bool HttpServer::Serve() { return server_->listen_after_bind(); }

void HttpServer::Stop() { server_->stop(); }

void HttpServer::ReplyError(httplib::Response& res, const ApiError& error,
                            const std::string& retry_after) {
  res.status = error.http_status;
  if (!retry_after.empty()) res.set_header("Retry-After", retry_after);
  res.set_content(error.ToJson(), "application/json");
}

void HttpServer::BadRequest(httplib::Response& res, const ApiError& error) {
  pipeline_.metrics().Count(Outcome::kBadRequest);
  ReplyError(res, error);
}

std::string HttpServer::ModelsJson() const {
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
  ojson body;
  body["object"] = "list";
  body["data"] = ojson::array({std::move(model)});
  return body.dump(-1, ' ', false, ojson::error_handler_t::replace);
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

void HttpServer::Models(const httplib::Request&, httplib::Response& res) {
  res.set_content(ModelsJson(), "application/json");
}

void HttpServer::Health(const httplib::Request&, httplib::Response& res) {
  bool ready = false;
  res.set_content(HealthJson(&ready), "application/json");
  res.status = ready ? 200 : 503;
}

void HttpServer::Metrics(const httplib::Request&, httplib::Response& res) {
  const std::vector<WorkerStatus> workers = registry_.Snapshot();
  res.set_content(RenderMetrics(pipeline_.metrics(), scheduler_.counters(), workers),
                  "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace dq::router
