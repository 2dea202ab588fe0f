// The prefill worker end to end over real gRPC and a real tcp transport: the KV that lands in the
// decode side's leased blocks, the first token, sampler draws and logprobs.
#include <thread>

#include "engine/generate/generator.h"
#include "engine/sampler/sampler.h"
#include "tests/unit/prefill_worker/prefill_fixture.h"

namespace dq::prefill::testing {
namespace {

// The first token the colocated `dqserve generate` path picks for `prompt`.
int32_t GeneratorFirstToken(const std::vector<int32_t>& prompt, const SamplingParams& params) {
  auto model = LoadTiny();
  Generator g(*model->runner, model->model->tokenizer, model->model->config.eos_token_ids);
  GenerationRequest r{prompt, params};
  r.params.max_tokens = 1;
  r.params.ignore_eos = true;
  auto out = g.Generate(std::span<const GenerationRequest>(&r, 1));
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() && !(*out)[0].tokens.empty() ? (*out)[0].tokens[0] : -1;
}

SamplingParams Greedy() {
  SamplingParams p;
  p.temperature = 0;
  return p;
}

TEST(PrefillKv, OneShotPromptLandsBitExactInTwoRuns) {
  PrefillHarness h({});
  ASSERT_NE(h.stub, nullptr);
  DecodeSide decode(h.kv_options(), h.layout());
  // 37 tokens = 3 blocks, split over two runs that are not adjacent in the decode pool.
  const std::vector<int32_t> prompt = Prompt(37);
  const v1::KvLease lease = decode.Lease("l1", {{5, 1}, {20, 3}});
  v1::PrefillResponse resp;
  const grpc::Status s = h.Prefill(Request(prompt, lease), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();

  LocalPrefill want(prompt);
  EXPECT_EQ(MaxKvDiff(decode.pool(), lease, want, 37), 0.0f);
  EXPECT_EQ(resp.request_id(), "req-l1");
  EXPECT_EQ(resp.commit().lease_id(), "l1");
  EXPECT_EQ(resp.commit().num_tokens(), 37u);
  EXPECT_EQ(resp.commit().first_token(), GeneratorFirstToken(prompt, Greedy()));
  EXPECT_FALSE(resp.commit().has_first_token_logprobs());
  EXPECT_EQ(resp.prompt_logprobs_size(), 0);
  // 3 blocks x 2 layers x K and V.
  EXPECT_EQ(resp.transfer_bytes(), 3u * 2 * 2 * decode.pool().block_bytes());
  EXPECT_GT(resp.compute_ms(), 0.0f);
  // Blocks past the prompt's stay untouched.
  EXPECT_EQ(decode.pool().key(0, 23, 0)[0], 1e30f);
  EXPECT_EQ(decode.pool().key(0, 4, 15)[0], 1e30f);

  const v1::WorkerHealthResponse health = h.Health();
  EXPECT_EQ(health.free_kv_blocks(), health.total_kv_blocks());
  EXPECT_EQ(health.running_requests(), 0u);
}

TEST(PrefillKv, UcxTransportLandsBitExact) {
  PrefillServerOptions o;
  o.transports = {"tcp", "ucx"};
  PrefillHarness h(o);
  ASSERT_NE(h.stub, nullptr);
  DecodeSide decode(h.kv_options(), h.layout(), "ucx");
  ASSERT_TRUE(decode.ok());
  const std::vector<int32_t> prompt = Prompt(45, 8);
  const v1::KvLease lease = decode.Lease("u", {{9, 2}, {2, 1}});
  v1::PrefillResponse resp;
  const grpc::Status s = h.Prefill(Request(prompt, lease), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  LocalPrefill want(prompt);
  EXPECT_EQ(MaxKvDiff(decode.pool(), lease, want, 45), 0.0f);
  EXPECT_EQ(resp.commit().first_token(), GeneratorFirstToken(prompt, Greedy()));
}

TEST(PrefillKv, ChunkedPromptLandsWithinTolerance) {
  PrefillServerOptions o;
  o.token_budget = 24;  // not a multiple of the block size: chunks rewrite a partial block
  PrefillHarness h(o);
  ASSERT_NE(h.stub, nullptr);
  DecodeSide decode(h.kv_options(), h.layout());
  const std::vector<int32_t> prompt = Prompt(100, 1);
  const v1::KvLease lease = decode.Lease("long", {{40, 2}, {3, 5}});
  v1::PrefillResponse resp;
  const grpc::Status s = h.Prefill(Request(prompt, lease), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();

  LocalPrefill want(prompt);
  const float diff = MaxKvDiff(decode.pool(), lease, want, 100);
  EXPECT_GE(diff, 0.0f);
  EXPECT_LT(diff, 1e-4f);
  EXPECT_EQ(resp.commit().num_tokens(), 100u);
  EXPECT_EQ(resp.commit().first_token(), GeneratorFirstToken(prompt, Greedy()));
  EXPECT_EQ(h.Health().free_kv_blocks(), h.Health().total_kv_blocks());
}

TEST(PrefillKv, ConcurrentRequestsShareBatchesAndEachLandsInItsLease) {
  PrefillServerOptions o;
  o.token_budget = 64;  // some requests batch together, the longest is chunked
  PrefillHarness h(o);
  ASSERT_NE(h.stub, nullptr);
  DecodeSide decode(h.kv_options(), h.layout());
  const std::vector<std::vector<int32_t>> prompts = {Prompt(20, 2), Prompt(33, 3), Prompt(90, 4),
                                                     Prompt(5, 5)};
  std::vector<v1::KvLease> leases = {decode.Lease("a", {{0, 2}}), decode.Lease("b", {{2, 3}}),
                                     decode.Lease("c", {{10, 3}, {30, 3}}),
                                     decode.Lease("d", {{6, 1}})};
  std::vector<v1::PrefillResponse> resp(prompts.size());
  std::vector<grpc::Status> status(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back(
        [&, i] { status[i] = h.Prefill(Request(prompts[i], leases[i]), &resp[i]); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(status[i].ok()) << i << ": " << status[i].error_message();
    LocalPrefill want(prompts[i]);
    const int n = static_cast<int>(prompts[i].size());
    const float diff = MaxKvDiff(decode.pool(), leases[i], want, n);
    EXPECT_GE(diff, 0.0f) << i;
    EXPECT_LT(diff, 1e-4f) << i;
    EXPECT_EQ(resp[i].commit().first_token(), GeneratorFirstToken(prompts[i], Greedy())) << i;
  }
  EXPECT_EQ(h.Health().free_kv_blocks(), h.Health().total_kv_blocks());
}

TEST(PrefillKv, PromptLogprobsAndFirstTokenLogprobsMatchLocalLogits) {
  for (int budget : {2048, 7}) {  // one shot, and chunks of 7
    PrefillServerOptions o;
    o.token_budget = budget;
    PrefillHarness h(o);
    ASSERT_NE(h.stub, nullptr);
    DecodeSide decode(h.kv_options(), h.layout());
    const std::vector<int32_t> prompt = Prompt(19, 6);
    v1::PrefillRequest req = Request(prompt, decode.Lease("lp", {{1, 2}}));
    req.set_prompt_logprobs(true);
    req.mutable_sampling()->set_logprobs(true);
    req.mutable_sampling()->set_top_logprobs(3);
    v1::PrefillResponse resp;
    const grpc::Status s = h.Prefill(req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();

    LocalPrefill want(prompt);
    ASSERT_EQ(resp.prompt_logprobs_size(), 18) << "budget " << budget;
    for (int p = 0; p + 1 < 19; ++p) {
      const v1::PositionLogprobs& lp = resp.prompt_logprobs(p);
      EXPECT_EQ(lp.chosen().token_id(), prompt[p + 1]);
      EXPECT_NEAR(lp.chosen().logprob(), LogSoftmaxAt(want.row(p), prompt[p + 1]), 1e-4);
      const auto top = TopLogprobs(want.row(p), 3);
      ASSERT_EQ(lp.top_size(), 3);
      EXPECT_EQ(lp.top(0).token_id(), top[0].token);
      EXPECT_NEAR(lp.top(0).logprob(), top[0].logprob, 1e-4);
    }
    const v1::PositionLogprobs& first = resp.commit().first_token_logprobs();
    EXPECT_EQ(first.chosen().token_id(), resp.commit().first_token());
    EXPECT_NEAR(first.chosen().logprob(), LogSoftmaxAt(want.row(18), resp.commit().first_token()),
                1e-4);
    EXPECT_EQ(first.top_size(), 3);
  }
}

TEST(PrefillKv, SeededSamplingReportsDrawsAndMatchesTheColocatedSampler) {
  PrefillHarness h({});
  ASSERT_NE(h.stub, nullptr);
  DecodeSide decode(h.kv_options(), h.layout());
  const std::vector<int32_t> prompt = Prompt(12, 7);
  v1::PrefillRequest req = Request(prompt, decode.Lease("s", {{0, 1}}));
  req.mutable_sampling()->set_temperature(1.5f);
  req.mutable_sampling()->set_seed(1234);
  v1::PrefillResponse resp;
  ASSERT_TRUE(h.Prefill(req, &resp).ok());

  SamplingParams p;
  p.temperature = 1.5f;
  p.seed = 1234;
  Sampler sampler(p);
  LocalPrefill want(prompt);
  std::vector<float> row(want.row(11).begin(), want.row(11).end());
  EXPECT_EQ(resp.commit().first_token(), sampler.Sample(row));
  EXPECT_EQ(resp.commit().sampler_draws(), sampler.draws());
  EXPECT_EQ(resp.commit().sampler_draws(), 1u);
  EXPECT_EQ(resp.commit().first_token(), GeneratorFirstToken(prompt, p));
}

}  // namespace
}  // namespace dq::prefill::testing
