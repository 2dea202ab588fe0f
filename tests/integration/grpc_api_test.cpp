// Integration tests of the public gRPC API (dqserve.v1.DqServe) against real processes: each
// fixture starts dq-decode, dq-prefill and dq-router (with --grpc-port) from DQ_BIN_DIR on free
// loopback ports, waits for Health SERVING, talks to the router through the generated stub (and
// over HTTP where the two front ends must agree), and stops everything with SIGTERM, expecting
// each process to exit 0 within a few seconds.
#include "tests/integration/deployment.h"

namespace {

using namespace dq::integration;  // NOLINT: test-local helpers

// ---------------------------------------------------------------------------------------------
// The tiny random Qwen3: fast, for everything but the text-quality check. --max-in-flight 1, so
// a request the router failed to end (abort, client cancel) would block every later one.

class GrpcApiTest : public DeploymentSuite<GrpcApiTest> {
 public:
  static DeploymentOptions Options() { return {TinyModel(), "", {"--max-in-flight", "1"}}; }
};

TEST_F(GrpcApiTest, ModelsListsTheServedModel) {
  grpc::ClientContext ctx;
  v1::ModelsResponse models;
  const grpc::Status s = stub().Models(&ctx, v1::ModelsRequest(), &models);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(models.models_size(), 1) << models.ShortDebugString();
  const v1::ModelInfo& m = models.models(0);
  // The default served name is the model path's stem.
  EXPECT_EQ(m.id(), "tiny-qwen3");
  EXPECT_FALSE(m.prefill_scheme().empty()) << m.ShortDebugString();
  EXPECT_FALSE(m.decode_scheme().empty()) << m.ShortDebugString();
  // make-tiny writes max_position_embeddings 4096.
  EXPECT_EQ(m.max_context_tokens(), 4096u);
  // The HTTP front end reports the same model.
  auto [status, body] = HttpJson(http_port(), "GET", "/v1/models");
  ASSERT_EQ(status, 200);
  ASSERT_EQ(body["data"].size(), 1u) << body.dump();
  EXPECT_EQ(body["data"][0]["id"], m.id());
  EXPECT_EQ(body["data"][0]["max_model_len"], m.max_context_tokens());
}

TEST_F(GrpcApiTest, HealthIsServingWithBothWorkers) {
  grpc::ClientContext ctx;
  v1::HealthResponse health;
  const grpc::Status s = stub().Health(&ctx, v1::HealthRequest(), &health);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(health.status(), v1::SERVING_STATUS_SERVING);
  ASSERT_EQ(health.workers_size(), 2) << health.ShortDebugString();
  std::map<std::string, const v1::WorkerHealth*> by_role;
  for (const auto& w : health.workers()) by_role[w.role()] = &w;
  ASSERT_EQ(by_role.count("prefill"), 1u) << health.ShortDebugString();
  ASSERT_EQ(by_role.count("decode"), 1u) << health.ShortDebugString();
  EXPECT_EQ(by_role["prefill"]->address(),
            "127.0.0.1:" + std::to_string(deployment_->prefill_port()));
  EXPECT_EQ(by_role["decode"]->address(),
            "127.0.0.1:" + std::to_string(deployment_->decode_port()));
  EXPECT_EQ(by_role["prefill"]->status(), v1::SERVING_STATUS_SERVING);
  EXPECT_EQ(by_role["decode"]->status(), v1::SERVING_STATUS_SERVING);
}

TEST_F(GrpcApiTest, PromptStreamMatchesHttpCompletion) {
  const Stream s = Generate(stub(), PromptRequest(kPrompt, 16));
  ASSERT_TRUE(WellFormed(s));
  const v1::GenerateResponse& f = s.last();
  EXPECT_FALSE(f.request_id().empty()) << "the router assigns an id when the client sends none";
  for (const auto& r : s.responses) EXPECT_EQ(r.request_id(), f.request_id());
  EXPECT_TRUE(f.finish_reason() == v1::FINISH_REASON_STOP ||
              f.finish_reason() == v1::FINISH_REASON_LENGTH)
      << f.ShortDebugString();
  EXPECT_GT(f.usage().completion_tokens(), 0u);
  EXPECT_LE(f.usage().completion_tokens(), 16u);
  EXPECT_GT(f.usage().ttft_ms(), 0.0f);
  EXPECT_TRUE(s.token_ids.empty()) << "token ids only with return_token_ids";

  auto [status, body] = HttpJson(http_port(), "POST", "/v1/completions",
                                 {{"prompt", kPrompt}, {"max_tokens", 16}, {"temperature", 0}});
  ASSERT_EQ(status, 200) << body.dump();
  EXPECT_EQ(s.text, body["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(f.usage().prompt_tokens(), body["usage"]["prompt_tokens"].get<uint32_t>());
  EXPECT_EQ(f.usage().completion_tokens(), body["usage"]["completion_tokens"].get<uint32_t>());
  EXPECT_EQ(f.finish_reason() == v1::FINISH_REASON_STOP ? "stop" : "length",
            body["choices"][0]["finish_reason"].get<std::string>());
}

TEST_F(GrpcApiTest, ChatStreamMatchesHttpChatCompletion) {
  v1::GenerateRequest req = ChatRequest("Hello! Who are you?", 12);
  req.set_request_id("chat-req-1");
  const Stream s = Generate(stub(), req);
  ASSERT_TRUE(WellFormed(s));
  EXPECT_EQ(s.last().request_id(), "chat-req-1");
  EXPECT_GT(s.last().usage().completion_tokens(), 0u);
  EXPECT_GT(s.last().usage().ttft_ms(), 0.0f);

  auto [status, body] =
      HttpJson(http_port(), "POST", "/v1/chat/completions",
               {{"messages", {{{"role", "user"}, {"content", "Hello! Who are you?"}}}},
                {"max_tokens", 12},
                {"temperature", 0}});
  ASSERT_EQ(status, 200) << body.dump();
  EXPECT_EQ(s.text, body["choices"][0]["message"]["content"].get<std::string>());
  // The chat template adds tokens around the message.
  EXPECT_EQ(s.last().usage().prompt_tokens(), body["usage"]["prompt_tokens"].get<uint32_t>());
}

TEST_F(GrpcApiTest, PromptTokenIdsMatchHttpTokenPrompt) {
  // Valid ids of this vocabulary: the ones a short greedy generation returns.
  v1::GenerateRequest seed_req = PromptRequest(kPrompt, 8);
  seed_req.set_return_token_ids(true);
  const Stream seed = Generate(stub(), seed_req);
  ASSERT_TRUE(WellFormed(seed));
  const std::vector<int32_t> ids = seed.token_ids;
  ASSERT_FALSE(ids.empty());
  v1::GenerateRequest req;
  req.mutable_prompt_token_ids()->mutable_ids()->Assign(ids.begin(), ids.end());
  req.mutable_sampling()->set_temperature(0);
  req.mutable_sampling()->set_max_tokens(12);
  const Stream s = Generate(stub(), req);
  ASSERT_TRUE(WellFormed(s));
  EXPECT_EQ(s.last().usage().prompt_tokens(), ids.size());
  EXPECT_GT(s.last().usage().completion_tokens(), 0u);
  EXPECT_GT(s.last().usage().ttft_ms(), 0.0f);

  auto [status, body] = HttpJson(http_port(), "POST", "/v1/completions",
                                 {{"prompt", ids}, {"max_tokens", 12}, {"temperature", 0}});
  ASSERT_EQ(status, 200) << body.dump();
  EXPECT_EQ(s.text, body["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(body["usage"]["prompt_tokens"].get<uint32_t>(), ids.size());
}

TEST_F(GrpcApiTest, ReturnTokenIdsCountsCompletionTokens) {
  v1::GenerateRequest req = PromptRequest(kPrompt, 10);
  req.set_return_token_ids(true);
  const Stream s = Generate(stub(), req);
  ASSERT_TRUE(WellFormed(s));
  EXPECT_GT(s.last().usage().completion_tokens(), 0u);
  EXPECT_EQ(s.token_ids.size(), s.last().usage().completion_tokens());
  // Same greedy request without ids: the same text.
  const Stream plain = Generate(stub(), PromptRequest(kPrompt, 10));
  ASSERT_TRUE(WellFormed(plain));
  EXPECT_EQ(s.text, plain.text);
  EXPECT_TRUE(plain.token_ids.empty());
  for (int32_t id : s.token_ids) EXPECT_GE(id, 0);
}

TEST_F(GrpcApiTest, StopStringEndsGenerationBeforeIt) {
  const Stream base = Generate(stub(), PromptRequest(kPrompt, 24));
  ASSERT_TRUE(WellFormed(base));
  const std::string& t = base.text;
  ASSERT_GE(t.size(), 6u) << "too little text to pick a stop string from: '" << t << "'";
  // A 2-character stop string from the middle of the text, whose first occurrence is where we
  // took it (so that the expected cut is known and not at 0).
  std::string stop;
  size_t at = 0;
  for (size_t i = t.size() / 2; i > 0 && stop.empty(); --i) {
    if (!IsUtf8Start(t, i)) continue;
    const size_t n1 = Utf8Len(t, i);
    if (i + n1 >= t.size()) continue;
    const std::string cand = t.substr(i, n1 + Utf8Len(t, i + n1));
    if (t.find(cand) == i) {
      stop = cand;
      at = i;
    }
  }
  ASSERT_FALSE(stop.empty()) << "no usable stop string in '" << t << "'";

  v1::GenerateRequest req = PromptRequest(kPrompt, 24);
  req.mutable_sampling()->add_stop("zzzz-never-generated");
  req.mutable_sampling()->add_stop(stop);
  const Stream s = Generate(stub(), req);
  ASSERT_TRUE(WellFormed(s));
  EXPECT_EQ(s.last().finish_reason(), v1::FINISH_REASON_STOP) << s.last().ShortDebugString();
  EXPECT_EQ(s.last().matched_stop_case(), v1::GenerateResponse::kStopString);
  EXPECT_EQ(s.last().stop_string(), stop);
  EXPECT_EQ(s.text, t.substr(0, at)) << "stop string '" << stop << "' in '" << t << "'";
  EXPECT_LT(s.last().usage().completion_tokens(), base.last().usage().completion_tokens());
}

TEST_F(GrpcApiTest, SeededSamplingIsReproducible) {
  auto sampled = [&](uint64_t seed) {
    v1::GenerateRequest req = PromptRequest(kPrompt, 16);
    req.mutable_sampling()->set_temperature(0.8f);
    req.mutable_sampling()->set_seed(seed);
    req.set_return_token_ids(true);
    return Generate(stub(), req);
  };
  const Stream a = sampled(7);
  const Stream b = sampled(7);
  ASSERT_TRUE(WellFormed(a));
  ASSERT_TRUE(WellFormed(b));
  ASSERT_FALSE(a.token_ids.empty());
  EXPECT_EQ(a.token_ids, b.token_ids);
  EXPECT_EQ(a.text, b.text);
}

TEST_F(GrpcApiTest, AbortEndsARunningRequest) {
  v1::GenerateRequest req = PromptRequest(kPrompt, 1000);
  req.mutable_sampling()->set_ignore_eos(true);
  const std::string id = "abort-me-" + std::to_string(getpid());
  req.set_request_id(id);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(60));
  auto reader = stub().Generate(&ctx, req);
  Stream s;
  v1::GenerateResponse r;
  ASSERT_TRUE(reader->Read(&r)) << reader->Finish().error_message();
  ASSERT_FALSE(r.finished()) << "finished before it could be aborted: " << r.ShortDebugString();
  s.responses.push_back(r);

  grpc::ClientContext abort_ctx;
  v1::AbortRequest abort;
  abort.set_request_id(id);
  v1::AbortResponse found;
  ASSERT_TRUE(stub().Abort(&abort_ctx, abort, &found).ok());
  EXPECT_TRUE(found.found());

  while (reader->Read(&r)) s.responses.push_back(r);
  s.status = reader->Finish();
  ASSERT_TRUE(WellFormed(s));
  EXPECT_EQ(s.last().finish_reason(), v1::FINISH_REASON_ABORT) << s.last().ShortDebugString();
  EXPECT_EQ(s.last().request_id(), id);
  EXPECT_LT(s.last().usage().completion_tokens(), 1000u);

  grpc::ClientContext again_ctx;
  v1::AbortResponse again;
  ASSERT_TRUE(stub().Abort(&again_ctx, abort, &again).ok());
  EXPECT_FALSE(again.found()) << "a finished request is no longer abortable";

  // The slot is free again (--max-in-flight 1): a new request runs.
  const Stream next = Generate(stub(), PromptRequest(kPrompt, 4));
  EXPECT_TRUE(WellFormed(next));
}

// With --max-in-flight 1, a second request waits in the router's queue behind a long one; Abort
// finds it there and ends it before it ever runs.
TEST_F(GrpcApiTest, AbortEndsAQueuedRequest) {
  v1::GenerateRequest long_req = PromptRequest(kPrompt, 1000);
  long_req.mutable_sampling()->set_ignore_eos(true);
  long_req.set_request_id("long-" + std::to_string(getpid()));
  grpc::ClientContext long_ctx;
  long_ctx.set_deadline(std::chrono::system_clock::now() + seconds(60));
  auto long_reader = stub().Generate(&long_ctx, long_req);
  v1::GenerateResponse r;
  ASSERT_TRUE(long_reader->Read(&r)) << long_reader->Finish().error_message();
  ASSERT_FALSE(r.finished());

  // The queued one runs on its own thread: its call blocks until it is admitted or ended.
  const std::string queued_id = "queued-" + std::to_string(getpid());
  Stream queued;
  std::thread t([&] {
    v1::GenerateRequest q = PromptRequest(kPrompt, 8);
    q.set_request_id(queued_id);
    queued = Generate(stub(), q);
  });
  // Abort it once the router knows it (Abort says found = false until then).
  v1::AbortRequest abort;
  abort.set_request_id(queued_id);
  bool found = false;
  const auto end = Clock::now() + seconds(10);
  while (!found && Clock::now() < end) {
    grpc::ClientContext ctx;
    v1::AbortResponse resp;
    ASSERT_TRUE(stub().Abort(&ctx, abort, &resp).ok());
    found = resp.found();
    if (!found) std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_TRUE(found);
  t.join();
  // It never generated anything; the router ends it either with a final ABORT response or (as
  // an error before streaming) a CANCELLED status.
  EXPECT_TRUE(queued.token_ids.empty() && queued.text.empty()) << queued.text;
  if (queued.status.ok()) {
    ASSERT_TRUE(WellFormed(queued));
    EXPECT_EQ(queued.last().finish_reason(), v1::FINISH_REASON_ABORT);
    EXPECT_EQ(queued.last().usage().completion_tokens(), 0u);
  } else {
    EXPECT_EQ(queued.status.error_code(), grpc::StatusCode::CANCELLED)
        << queued.status.error_message();
    EXPECT_TRUE(queued.responses.empty());
  }
  // The long one is still running, and still abortable.
  grpc::ClientContext ctx;
  v1::AbortResponse resp;
  abort.set_request_id(long_req.request_id());
  ASSERT_TRUE(stub().Abort(&ctx, abort, &resp).ok());
  EXPECT_TRUE(resp.found());
  while (long_reader->Read(&r)) {
  }
  EXPECT_TRUE(r.finished());
  EXPECT_EQ(r.finish_reason(), v1::FINISH_REASON_ABORT);
  EXPECT_TRUE(long_reader->Finish().ok());
}

TEST_F(GrpcApiTest, ClientCancelFreesTheRouterForTheNextRequest) {
  const std::string cancelled = "dq_requests_total{outcome=\"cancelled\"}";
  const double before = Metric(http_port(), cancelled);
  ASSERT_GE(before, 0) << "no " << cancelled << " in /metrics";
  {
    v1::GenerateRequest req = PromptRequest(kPrompt, 1000);
    req.mutable_sampling()->set_ignore_eos(true);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(60));
    auto reader = stub().Generate(&ctx, req);
    v1::GenerateResponse r;
    ASSERT_TRUE(reader->Read(&r));
    ASSERT_FALSE(r.finished());
    ctx.TryCancel();
    while (reader->Read(&r)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // The router noticed (it counts the request as cancelled) and released its slot.
  const auto end = Clock::now() + seconds(10);
  while (Clock::now() < end && Metric(http_port(), cancelled) < before + 1) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(Metric(http_port(), cancelled), before + 1);
  // --max-in-flight 1: this only runs once the cancelled request is gone.
  const auto start = Clock::now();
  const Stream next = Generate(stub(), PromptRequest(kPrompt, 8));
  ASSERT_TRUE(WellFormed(next));
  EXPECT_GT(next.last().usage().completion_tokens(), 0u);
  EXPECT_LT(Clock::now() - start, seconds(20));
  EXPECT_EQ(Metric(http_port(), "dq_requests_running"), 0);
}

TEST_F(GrpcApiTest, BadTemperatureIsInvalidArgument) {
  v1::GenerateRequest req = PromptRequest(kPrompt, 4);
  req.mutable_sampling()->set_temperature(5);
  const Stream s = Generate(stub(), req);
  EXPECT_EQ(s.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.status.error_message();
  EXPECT_NE(s.status.error_message().find("temperature"), std::string::npos)
      << s.status.error_message();
  EXPECT_TRUE(s.responses.empty());
}

TEST_F(GrpcApiTest, EmptyInputIsInvalidArgument) {
  v1::GenerateRequest none;  // no input at all
  none.mutable_sampling()->set_max_tokens(4);
  const Stream a = Generate(stub(), none);
  EXPECT_EQ(a.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << a.status.error_message();
  EXPECT_NE(a.status.error_message().find("input"), std::string::npos) << a.status.error_message();
  EXPECT_TRUE(a.responses.empty());

  const Stream b = Generate(stub(), PromptRequest("", 4));
  EXPECT_EQ(b.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << b.status.error_message();
  EXPECT_NE(b.status.error_message().find("prompt"), std::string::npos) << b.status.error_message();

  v1::GenerateRequest no_ids;
  no_ids.mutable_prompt_token_ids();
  no_ids.mutable_sampling()->set_max_tokens(4);
  const Stream c = Generate(stub(), no_ids);
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.status.error_message();

  v1::GenerateRequest no_messages;
  no_messages.mutable_chat()->set_add_generation_prompt(true);
  const Stream d = Generate(stub(), no_messages);
  EXPECT_EQ(d.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << d.status.error_message();
  EXPECT_NE(d.status.error_message().find("messages"), std::string::npos)
      << d.status.error_message();
}

TEST_F(GrpcApiTest, UnknownModelIsNotFound) {
  v1::GenerateRequest req = PromptRequest(kPrompt, 4);
  req.set_model("gpt-17");
  const Stream s = Generate(stub(), req);
  EXPECT_EQ(s.status.error_code(), grpc::StatusCode::NOT_FOUND) << s.status.error_message();
  EXPECT_NE(s.status.error_message().find("gpt-17"), std::string::npos) << s.status.error_message();
  EXPECT_TRUE(s.responses.empty());
  // The served name works.
  req.set_model("tiny-qwen3");
  EXPECT_TRUE(WellFormed(Generate(stub(), req)));
}

// ---------------------------------------------------------------------------------------------
// An API key (env DQ_API_KEY): every call but Health needs "authorization: Bearer <key>".

class GrpcApiKeyTest : public DeploymentSuite<GrpcApiKeyTest> {
 public:
  static DeploymentOptions Options() { return {TinyModel(), kKey, {}}; }

 protected:
  static constexpr char kKey[] = "grpc-test-key-42";
};

TEST_F(GrpcApiKeyTest, CallsNeedTheBearerKey) {
  for (const std::string key : {"", "wrong-key"}) {
    SCOPED_TRACE("key '" + key + "'");
    grpc::ClientContext models_ctx;
    AddAuth(models_ctx, key);
    v1::ModelsResponse models;
    EXPECT_EQ(stub().Models(&models_ctx, v1::ModelsRequest(), &models).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);

    const Stream s = Generate(stub(), PromptRequest(kPrompt, 4), key);
    EXPECT_EQ(s.status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.status.error_message();
    EXPECT_TRUE(s.responses.empty());

    grpc::ClientContext abort_ctx;
    AddAuth(abort_ctx, key);
    v1::AbortRequest abort;
    abort.set_request_id("whatever");
    v1::AbortResponse found;
    EXPECT_EQ(stub().Abort(&abort_ctx, abort, &found).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  // A non-Bearer scheme with the right key is refused too.
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", std::string("Basic ") + kKey);
    v1::ModelsResponse models;
    EXPECT_EQ(stub().Models(&ctx, v1::ModelsRequest(), &models).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
}

TEST_F(GrpcApiKeyTest, TheRightKeyIsAcceptedAndHealthIsExempt) {
  grpc::ClientContext models_ctx;
  AddAuth(models_ctx, kKey);
  v1::ModelsResponse models;
  const grpc::Status ms = stub().Models(&models_ctx, v1::ModelsRequest(), &models);
  ASSERT_TRUE(ms.ok()) << ms.error_message();
  EXPECT_EQ(models.models_size(), 1);

  const Stream s = Generate(stub(), PromptRequest(kPrompt, 4), kKey);
  EXPECT_TRUE(WellFormed(s));

  grpc::ClientContext abort_ctx;
  AddAuth(abort_ctx, kKey);
  v1::AbortRequest abort;
  abort.set_request_id("no-such-request");
  v1::AbortResponse found;
  ASSERT_TRUE(stub().Abort(&abort_ctx, abort, &found).ok());
  EXPECT_FALSE(found.found());

  grpc::ClientContext health_ctx;  // no key
  v1::HealthResponse health;
  const grpc::Status hs = stub().Health(&health_ctx, v1::HealthRequest(), &health);
  ASSERT_TRUE(hs.ok()) << hs.error_message();
  EXPECT_EQ(health.status(), v1::SERVING_STATUS_SERVING);
}

// ---------------------------------------------------------------------------------------------
// SmolLM2-135M-Instruct: a real model, so the answer's text can be checked.

class GrpcSmolTest : public DeploymentSuite<GrpcSmolTest> {
 public:
  static DeploymentOptions Options() { return {SmolModel(), "", {}}; }
};

TEST_F(GrpcSmolTest, ChatAnswerNamesParisAndMatchesHttp) {
  const std::string question = "What is the capital of France?";
  const Stream s = Generate(deployment_->stub(), ChatRequest(question, 24));
  ASSERT_TRUE(WellFormed(s));
  EXPECT_NE(s.text.find("Paris"), std::string::npos) << s.text;
  EXPECT_GT(s.last().usage().ttft_ms(), 0.0f);
  EXPECT_GT(s.responses.size(), 2u) << "the answer should stream in several deltas";

  auto [status, body] = HttpJson(deployment_->http_port(), "POST", "/v1/chat/completions",
                                 {{"messages", {{{"role", "user"}, {"content", question}}}},
                                  {"max_tokens", 24},
                                  {"temperature", 0}});
  ASSERT_EQ(status, 200) << body.dump();
  EXPECT_EQ(s.text, body["choices"][0]["message"]["content"].get<std::string>());
}

}  // namespace
