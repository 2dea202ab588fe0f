// Disaggregated decode equals colocated generation token for token: the test prefills on its
// own runner, ships the KV over tcp into the worker's lease, and reads the worker's stream.
#include <gmock/gmock.h>

#include <thread>

#include "tests/unit/decode_worker/decode_worker_fixture.h"

namespace dq::decode::testing {
namespace {

using ::testing::HasSubstr;

TEST_F(DecodeWorkerTest, GreedyStreamEqualsColocatedGeneration) {
  for (const std::string text : {"Hello there, how are you today?",
                                 "1 2 3 4 5 6 7 8 9 10 11 12 13 "
                                 "14 15 16 17 18 19 20"}) {
    const auto prompt = Prompt(text);
    const v1::SamplingParams p = Greedy(24);
    const GenerationResult want = Colocated(prompt, p);
    const StreamResult got = Disaggregated("greedy-" + std::to_string(prompt.size()), prompt, p);
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();
    EXPECT_TRUE(got.finished);
    EXPECT_EQ(got.reason, v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(got.tokens, want.tokens) << text;
    EXPECT_EQ(got.tokens.size(), 24u);
    EXPECT_GE(got.responses, 2);  // the first token, then the steps
  }
}

TEST_F(DecodeWorkerTest, EosOnStreamEqualsColocatedGeneration) {
  // EOS honoured: both paths stop at the same place (or run to max_tokens alike).
  const auto prompt = Prompt("The quick brown fox");
  const v1::SamplingParams p = Greedy(40, /*ignore_eos=*/false);
  const GenerationResult want = Colocated(prompt, p);
  const StreamResult got = Disaggregated("eos-on", prompt, p);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.reason, want.finish_reason == FinishReason::kStop ? v1::FINISH_REASON_STOP
                                                                  : v1::FINISH_REASON_LENGTH);
}

TEST_F(DecodeWorkerTest, StopTokenIdEndsTheStreamWithoutSendingIt) {
  const auto prompt = Prompt("abc abc abc abc");
  const GenerationResult free_run = Colocated(prompt, Greedy(12));
  ASSERT_GE(free_run.tokens.size(), 6u);
  v1::SamplingParams p = Greedy(12);
  p.add_stop_token_ids(free_run.tokens[4]);
  const GenerationResult want = Colocated(prompt, p);
  const StreamResult got = Disaggregated("stop-id", prompt, p);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_LT(got.tokens.size(), 5u);
  EXPECT_EQ(got.reason, v1::FINISH_REASON_STOP);
}

TEST_F(DecodeWorkerTest, SeededSamplingContinuesThePrefillWorkersStream) {
  const auto prompt = Prompt("Once upon a time");
  v1::SamplingParams p;
  p.set_temperature(1.0f);
  p.set_seed(1234);
  p.set_max_tokens(16);
  p.set_ignore_eos(true);
  const GenerationResult want = Colocated(prompt, p);
  const StreamResult got = Disaggregated("seeded", prompt, p);
  EXPECT_EQ(got.tokens, want.tokens);
}

TEST_F(DecodeWorkerTest, LogprobsComeWithEveryToken) {
  const auto prompt = Prompt("Logprobs please");
  v1::SamplingParams p = Greedy(6);
  p.set_logprobs(true);
  p.set_top_logprobs(3);
  const StreamResult got = Disaggregated("logprobs", prompt, p);
  ASSERT_EQ(got.tokens.size(), 6u);
  ASSERT_EQ(got.logprobs.size(), got.tokens.size());
  for (size_t i = 0; i < got.tokens.size(); ++i) {
    EXPECT_EQ(got.logprobs[i].chosen().token_id(), got.tokens[i]);
    EXPECT_LE(got.logprobs[i].chosen().logprob(), 0.0f);
    ASSERT_EQ(got.logprobs[i].top_size(), 3);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(got.logprobs[i].top(0).token_id(), got.tokens[i]);
    EXPECT_FLOAT_EQ(got.logprobs[i].top(0).logprob(), got.logprobs[i].chosen().logprob());
  }
}

TEST_F(DecodeWorkerTest, FirstTokenEosFinishesWithNoTokens) {
  ASSERT_FALSE(model_->config.eos_token_ids.empty());
  const auto prompt = Prompt("short");
  auto lease = Reserve("first-eos", prompt.size(), 8);
  ASSERT_TRUE(lease.ok()) << lease.status();
  v1::KvCommit commit = Prefill(*lease, prompt, Greedy(8));
  commit.set_first_token(model_->config.eos_token_ids[0]);
  const StreamResult got = Decode("first-eos", commit, Greedy(8, /*ignore_eos=*/false));
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_TRUE(got.tokens.empty());
  EXPECT_EQ(got.reason, v1::FINISH_REASON_STOP);
  EXPECT_EQ(got.responses, 1);
}

TEST_F(DecodeWorkerTest, MaxTokensOneSendsOnlyTheFirstToken) {
  const auto prompt = Prompt("one token only");
  const StreamResult got = Disaggregated("max1", prompt, Greedy(1));
  ASSERT_EQ(got.tokens.size(), 1u);
  EXPECT_EQ(got.tokens, Colocated(prompt, Greedy(1)).tokens);
  EXPECT_EQ(got.reason, v1::FINISH_REASON_LENGTH);
}

TEST_F(DecodeWorkerTest, MoreRequestsThanMaxBatchAllComplete) {
  // max_batch is 2; five requests join as slots free (continuous batching).
  const int kRequests = 5;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<v1::KvCommit> commits;
  std::vector<GenerationResult> want;
  for (int i = 0; i < kRequests; ++i) {
    prompts.push_back(Prompt("request number " + std::to_string(i) + " says hi"));
    const v1::SamplingParams p = Greedy(10 + 3 * i);
    want.push_back(Colocated(prompts.back(), p));
    auto lease = Reserve("batch-" + std::to_string(i), prompts.back().size(), p.max_tokens());
    ASSERT_TRUE(lease.ok()) << lease.status();
    commits.push_back(Prefill(*lease, prompts.back(), p));
  }
  std::vector<StreamResult> got(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back(
        [&, i] { got[i] = Decode("batch-" + std::to_string(i), commits[i], Greedy(10 + 3 * i)); });
  }
  for (auto& t : clients) t.join();
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_TRUE(got[i].status.ok()) << got[i].status.error_message();
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].reason, v1::FINISH_REASON_LENGTH);
  }
  EXPECT_EQ(server_->batcher().peak_batch(), 2);  // never more than max_batch, and batched
}

TEST_F(DecodeWorkerTest, UcxTransportGivesTheSameTokens) {
  kvtransfer::TransportConfig ucx;
  ucx.kind = "ucx";
  auto sender = kvtransfer::CreateTransport(ucx);
  if (!sender.ok()) GTEST_SKIP() << "ucx backend not built here: " << sender.status();
  TearDownServer();
  StartServer(/*max_batch=*/2, /*lease_ttl_ms=*/30000, "ucx");
  sender_ = std::move(*sender);
  const auto prompt = Prompt("over ucx this time");
  const StreamResult got = Disaggregated("ucx", prompt, Greedy(12));
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.tokens, Colocated(prompt, Greedy(12)).tokens);
}

TEST_F(DecodeWorkerTest, MaxTokensBeyondTheLeaseFailsCleanly) {
  const auto prompt = Prompt("a lease too small");  // under one block of 16 tokens
  ASSERT_LT(prompt.size(), 16u);
  auto lease = Reserve("small-lease", prompt.size(), /*max_new=*/0);
  ASSERT_TRUE(lease.ok()) << lease.status();
  const v1::KvCommit commit = Prefill(*lease, prompt, Greedy(100));
  const StreamResult got = Decode("small-lease", commit, Greedy(100));
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.reason, v1::FINISH_REASON_ERROR);
  EXPECT_THAT(got.error, HasSubstr("max_new_tokens"));
  // It decoded until the one block was full: 16 - prompt positions, plus the first token.
  EXPECT_EQ(got.tokens.size(), 16 - prompt.size() + 1);
}

}  // namespace
}  // namespace dq::decode::testing
