// n choices of several prompts (router/choice_fanout.h) through in-process gRPC fakes of both
// workers whose answer is a function of the request's seed and prompt: each choice gets its own
// seed (seed + j), reaches its own index (i * n + j), runs at most `concurrency` at once, and
// the first failure ends the fan-out with that failure's error.
#include "router/choice_fanout.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dqserve/v1/worker.grpc.pb.h"
#include "tests/unit/router/loopback_pipeline.h"
#include "tests/unit/router/router_test_model.h"

namespace dq::router {
namespace {

namespace v1 = dqserve::v1;
using std::chrono::milliseconds;

// The first token a seeded request gets for a prompt of `len` tokens.
int32_t FirstToken(uint64_t seed, size_t len) { return static_cast<int32_t>(10 + seed % 50 + len); }

class FakePrefill final : public v1::PrefillWorker::Service {
  grpc::Status Prefill(grpc::ServerContext*, const v1::PrefillRequest* r,
                       v1::PrefillResponse* out) override {
    out->set_request_id(r->request_id());
    v1::KvCommit* c = out->mutable_commit();
    c->set_lease_id(r->lease().lease_id());
    c->set_num_tokens(static_cast<uint32_t>(r->prompt_token_ids_size()));
    c->set_first_token(FirstToken(r->sampling().seed(), r->prompt_token_ids_size()));
    return grpc::Status::OK;
  }
};

// Streams the committed token and the one after it, slowly enough that concurrent choices
// overlap; a request whose seed is `fail_seed` fails instead. Counts the most Decodes at once.
class FakeDecode final : public v1::DecodeWorker::Service {
 public:
  std::atomic<uint64_t> fail_seed{~uint64_t{0}};
  std::atomic<int> live{0};
  std::atomic<int> most_live{0};
  std::atomic<int> calls{0};

 private:
  grpc::Status Reserve(grpc::ServerContext*, const v1::ReserveRequest* r,
                       v1::KvLease* out) override {
    out->set_lease_id("lease-" + r->request_id());
    out->set_request_id(r->request_id());
    return grpc::Status::OK;
  }
  grpc::Status Decode(grpc::ServerContext*, const v1::DecodeRequest* r,
                      grpc::ServerWriter<v1::DecodeResponse>* w) override {
    ++calls;
    const int now = ++live;
    int seen = most_live.load();
    while (now > seen && !most_live.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(milliseconds(30));
    --live;
    if (r->sampling().seed() == fail_seed) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "engine failed");
    }
    v1::DecodeResponse resp;
    resp.set_request_id(r->request_id());
    resp.add_token_ids(r->commit().first_token());
    resp.add_token_ids(r->commit().first_token() + 1);
    resp.set_finished(true);
    resp.set_finish_reason(v1::FINISH_REASON_LENGTH);
    w->Write(resp);
    return grpc::Status::OK;
  }
  grpc::Status Health(grpc::ServerContext*, const v1::WorkerHealthRequest*,
                      v1::WorkerHealthResponse* out) override {
    out->set_status(v1::SERVING_STATUS_SERVING);
    return grpc::Status::OK;
  }
  grpc::Status Release(grpc::ServerContext*, const v1::ReleaseRequest*,
                       v1::ReleaseResponse*) override {
    return grpc::Status::OK;
  }
};

GenerationInput Prompt(std::vector<int32_t> ids, std::optional<uint64_t> seed) {
  GenerationInput in;
  in.prompt_ids = std::move(ids);
  in.max_tokens = 2;
  in.sampling.seed = seed;
  return in;
}

class ChoiceFanoutTest : public ::testing::Test {
 protected:
  ChoiceFanoutTest()
      : model_(TestModel()), scheduler_(SchedulerOptions{8, 64, milliseconds(5000)}) {}

  // Runs the inputs; `tokens[i]` gets choice i's streamed tokens, `done` the finished indexes.
  FanoutOutcome Run(std::vector<GenerationInput> inputs, int concurrency) {
    tokens.assign(inputs.size(), {});
    done.clear();
    FanoutCallbacks cb;
    cb.started = [](size_t, ActiveRequest&) { return true; };
    cb.delta = [&](size_t i, const Delta& d) {
      tokens[i].insert(tokens[i].end(), d.token_ids.begin(), d.token_ids.end());
      return true;
    };
    cb.done = [&](size_t i, const GenerationResult& r) {
      done.push_back(i);
      usage[i] = r.usage;
    };
    return RunFanout(workers_.pipeline(), std::move(inputs), concurrency, cb);
  }

  std::vector<std::vector<int32_t>> tokens;
  std::vector<size_t> done;
  std::map<size_t, Usage> usage;
  ServedModel model_;
  Scheduler scheduler_;
  RouterMetrics metrics_;
  FakePrefill prefill_;
  FakeDecode decode_;
  LoopbackPipeline workers_{&prefill_, &decode_, model_, scheduler_, metrics_};
};

TEST(FanoutInputsTest, ChoiceIndexSeedAndIds) {
  std::vector<GenerationInput> prompts = {Prompt({1}, 100), Prompt({2, 3}, 100), Prompt({4}, 100)};
  std::vector<GenerationInput> in = FanoutInputs(prompts, 2, "cmpl-x");
  ASSERT_EQ(in.size(), 6u);
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t prompt = k / 2, j = k % 2;
    EXPECT_EQ(in[k].prompt_ids, prompts[prompt].prompt_ids) << k;
    EXPECT_EQ(in[k].sampling.seed, uint64_t{100 + j}) << k;  // choice 0 is the n = 1 request
    EXPECT_EQ(in[k].request_id, "cmpl-x-" + std::to_string(k));
  }
  // One prompt, one choice: the request keeps its id; unseeded choices stay unseeded.
  in = FanoutInputs({Prompt({1}, std::nullopt)}, 1, "cmpl-y");
  ASSERT_EQ(in.size(), 1u);
  EXPECT_EQ(in[0].request_id, "cmpl-y");
  EXPECT_FALSE(in[0].sampling.seed.has_value());
  in = FanoutInputs({Prompt({1}, std::nullopt)}, 3, "cmpl-z");
  ASSERT_EQ(in.size(), 3u);
  for (const GenerationInput& g : in) EXPECT_FALSE(g.sampling.seed.has_value());
}

TEST_F(ChoiceFanoutTest, EachChoiceGetsItsOwnSeedAndIndex) {
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {4}, {5, 6}, {7, 8, 9, 10}};
  std::vector<GenerationInput> p;
  for (const auto& ids : prompts) p.push_back(Prompt(ids, 7));
  const int n = 3;
  FanoutOutcome out = Run(FanoutInputs(std::move(p), n, "cmpl-a"), 4);
  ASSERT_TRUE(out.ok()) << out.error->message;
  ASSERT_EQ(done.size(), 12u);
  std::sort(done.begin(), done.end());
  for (size_t k = 0; k < 12; ++k) {
    EXPECT_EQ(done[k], k);
    const auto& ids = prompts[k / n];
    const int32_t first = FirstToken(7 + k % n, ids.size());
    EXPECT_EQ(tokens[k], (std::vector<int32_t>{first, first + 1})) << "choice " << k;
    EXPECT_EQ(usage[k].prompt_tokens, static_cast<int>(ids.size())) << k;
    EXPECT_EQ(usage[k].completion_tokens, 2) << k;
  }
  EXPECT_LE(decode_.most_live.load(), 4);
  EXPECT_GE(decode_.most_live.load(), 2);  // the choices did run side by side
}

TEST_F(ChoiceFanoutTest, ConcurrencyOneRunsTheChoicesInTurn) {
  FanoutOutcome out = Run(FanoutInputs({Prompt({1, 2}, 3)}, 4, "cmpl-b"), 1);
  ASSERT_TRUE(out.ok()) << out.error->message;
  EXPECT_EQ(done, (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(decode_.most_live.load(), 1);
}

TEST_F(ChoiceFanoutTest, TheFirstFailureIsTheOutcomeAndStopsTheRest) {
  decode_.fail_seed = 21;  // choice 1 of each prompt (seed 20 + 1)
  std::vector<GenerationInput> p;
  for (int i = 0; i < 4; ++i) p.push_back(Prompt({1, 2}, 20));
  FanoutOutcome out = Run(FanoutInputs(std::move(p), 2, "cmpl-c"), 1);
  ASSERT_FALSE(out.ok());
  EXPECT_GE(out.error->http_status, 500);
  EXPECT_FALSE(out.error_before_start);  // choice 0 had started
  EXPECT_EQ(done, (std::vector<size_t>{0}));
  EXPECT_EQ(decode_.calls.load(), 2);  // nothing started after the failure
}

TEST_F(ChoiceFanoutTest, AClientGoneAtStartStopsEverything) {
  tokens.assign(6, {});
  FanoutCallbacks cb;
  std::atomic<int> started{0};
  cb.started = [&](size_t, ActiveRequest&) { return ++started < 2; };
  FanoutOutcome out =
      RunFanout(workers_.pipeline(), FanoutInputs({Prompt({1}, 1)}, 6, "cmpl-d"), 1, cb);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error->http_status, 499);
  EXPECT_EQ(started.load(), 2);
}

}  // namespace
}  // namespace dq::router
