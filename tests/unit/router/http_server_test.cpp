// The HTTP front end over a real socket, with workers configured but not live: every error path
// a client can reach without a worker, and that the server keeps serving after each.
#include "router/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <thread>

#include "nlohmann/json.hpp"
#include "tests/unit/router/router_test_model.h"

namespace dq::router {
namespace {

using nlohmann::json;

class HttpServerTest : public ::testing::Test {
 protected:
  HttpServerTest()
      : model_(TestModel(64)),
        scheduler_(SchedulerOptions{2, 4, std::chrono::milliseconds(1000)}),
        registry_(Workers()),
        pipeline_(PipelineOptions{}, model_, scheduler_, registry_, metrics_),
        server_(Options(), pipeline_, registry_, scheduler_) {}
  static WorkerRegistryOptions Workers() {
    WorkerRegistryOptions o;
    o.prefill_addresses = {"127.0.0.1:1"};
    o.decode_addresses = {"127.0.0.1:1"};
    return o;
  }
  static HttpServerOptions Options() {
    HttpServerOptions o;
    o.port = 0;
    o.api_keys = {"k3y"};
    o.max_body_bytes = 4096;
    o.threads = 4;
    return o;
  }
  void SetUp() override {
    port_ = server_.Bind();
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_.Serve(); });
  }
  void TearDown() override {
    server_.Stop();
    if (thread_.joinable()) thread_.join();
  }
  httplib::Result Post(const std::string& path, const std::string& body, bool auth = true) {
    httplib::Client c("127.0.0.1", port_);
    httplib::Headers h;
    if (auth) h.emplace("Authorization", "Bearer k3y");
    return c.Post(path.c_str(), h, body, "application/json");
  }
  httplib::Result Get(const std::string& path, bool auth = true) {
    httplib::Client c("127.0.0.1", port_);
    httplib::Headers h;
    if (auth) h.emplace("Authorization", "Bearer k3y");
    return c.Get(path.c_str(), h);
  }
  static json Error(const httplib::Result& r) { return json::parse(r->body)["error"]; }

  ServedModel model_;
  Scheduler scheduler_;
  WorkerRegistry registry_;
  RouterMetrics metrics_;
  RequestPipeline pipeline_;
  HttpServer server_;
  int port_ = 0;
  std::thread thread_;
};

TEST_F(HttpServerTest, HealthNeedsNoKeyAndIs503WithoutLiveWorkers) {
  auto r = Get("/health", /*auth=*/false);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  const json body = json::parse(r->body);
  EXPECT_EQ(body["status"], "unavailable");
  ASSERT_EQ(body["workers"].size(), 2u);
  EXPECT_EQ(body["workers"][0]["status"], "not_serving");
  // Each worker that does not serve is named, with its role.
  ASSERT_EQ(body["down"].size(), 2u);
  EXPECT_NE(body["down"][0].get<std::string>().find(" worker "), std::string::npos) << body;
}

TEST_F(HttpServerTest, EverythingElseNeedsTheKey) {
  for (const char* path : {"/v1/models", "/metrics"}) {
    auto r = Get(path, /*auth=*/false);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << path;
    EXPECT_EQ(Error(r)["code"], "invalid_api_key");
  }
  auto r = Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})", false);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
}

TEST_F(HttpServerTest, ModelsListsTheServedModelWithItsContext) {
  auto r = Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const json body = json::parse(r->body);
  EXPECT_EQ(body["object"], "list");
  EXPECT_EQ(body["data"][0]["id"], "tiny");
  EXPECT_EQ(body["data"][0]["max_model_len"], 64);
  EXPECT_TRUE(body["data"][0].contains("dq_prefill_scheme"));
}

TEST_F(HttpServerTest, OneModelByIdOr404) {
  auto r = Get("/v1/models/tiny");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const json body = json::parse(r->body);
  EXPECT_EQ(body["id"], "tiny");
  EXPECT_EQ(body["object"], "model");
  EXPECT_EQ(body["max_model_len"], 64);
  r = Get("/v1/models/gpt-4");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(Error(r)["code"], "model_not_found");
  EXPECT_EQ(Get("/v1/models/tiny", /*auth=*/false)->status, 401);
}

TEST_F(HttpServerTest, BadBodiesAre400Or404Or413NamingTheProblem) {
  auto r = Post("/v1/chat/completions", R"({"messages":[{"role":"robot","content":"x"}]})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Error(r)["param"], "messages[0].role");
  r = Post("/v1/completions", "{not json");
  EXPECT_EQ(r->status, 400);
  r = Post("/v1/completions", R"({"model":"gpt-4","prompt":"x"})");
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(Error(r)["code"], "model_not_found");
  r = Post("/v1/completions", R"({"prompt":"x","max_tokens":500})");
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Error(r)["code"], "context_length_exceeded");
  r = Post("/v1/completions", std::string(5000, ' '));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(Error(r)["code"], "request_too_large");
  r = Get("/v2/nothing");
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(Error(r)["code"], "not_found");
}

TEST_F(HttpServerTest, AValidRequestWithoutWorkersIs503AndTheServerKeepsServing) {
  for (bool stream : {false, true}) {
    json body = {{"prompt", "hello"}, {"max_tokens", 2}, {"stream", stream}};
    auto r = Post("/v1/completions", body.dump());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503);
    EXPECT_EQ(Error(r)["type"], "service_unavailable");
  }
  auto m = Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->body.find("dq_requests_total{outcome=\"error\"} 2\n"), std::string::npos) << m->body;
  EXPECT_EQ(scheduler_.counters().in_flight, 0);
}

TEST_F(HttpServerTest, TokenizeAndDetokenizeNeedTheKeyAndRoundTrip) {
  const std::string text = "Grüße, 世界 🎉";
  EXPECT_EQ(Post("/tokenize", json{{"prompt", text}}.dump(), /*auth=*/false)->status, 401);
  EXPECT_EQ(Post("/detokenize", R"({"tokens": [1]})", /*auth=*/false)->status, 401);
  auto r = Post("/tokenize", json{{"model", "tiny"}, {"prompt", text}}.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json body = json::parse(r->body);
  EXPECT_EQ(body["tokens"].get<std::vector<int32_t>>(), model_.tokenizer.Encode(text));
  EXPECT_EQ(body["count"], body["tokens"].size());
  EXPECT_EQ(body["max_model_len"], 64);
  r = Post("/detokenize", json{{"tokens", body["tokens"]}}.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["prompt"], text);
  r = Post("/tokenize", R"({"model": "gpt-4", "prompt": "x"})");
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(Error(r)["code"], "model_not_found");
  r = Post("/detokenize", R"({"tokens": [99999999]})");
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Error(r)["param"], "tokens[0]");
  r = Post("/tokenize", "{bad");
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Get("/tokenize")->status, 404);  // POST only
}

}  // namespace
}  // namespace dq::router
