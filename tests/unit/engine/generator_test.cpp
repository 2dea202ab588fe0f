// Generation on the tiny Qwen3: batching, seeds, stop conditions, limits and KV accounting.
#include "engine/generate/generator.h"

#include <gtest/gtest.h>

#include "tests/unit/engine/tiny_model.h"

namespace dq {
namespace {

class GeneratorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::LoadTinyQwen3();
    ASSERT_NE(model_, nullptr);
    ModelRunnerOptions o;
    o.threads = 2;
    o.kv_capacity = 1024;
    auto r = ModelRunner::Create(*model_->checkpoint, model_->config, o);
    ASSERT_TRUE(r.ok()) << r.status();
    runner_ = std::move(*r);
    free_blocks_ = runner_->kv_pool().num_free_blocks();
  }
  void TearDown() override {
    if (runner_) EXPECT_EQ(runner_->kv_pool().num_free_blocks(), free_blocks_);
  }

  GenerationRequest Request(const std::string& text, int max_tokens, float temperature = 0) {
    GenerationRequest r;
    r.prompt = model_->tokenizer.Encode(text);
    r.params.max_tokens = max_tokens;
    r.params.temperature = temperature;
    r.params.ignore_eos = true;
    return r;
  }

  std::vector<GenerationResult> Run(std::vector<GenerationRequest> reqs) {
    Generator g(*runner_, model_->tokenizer, model_->config.eos_token_ids);
    auto r = g.Generate(reqs);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<GenerationResult>{};
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<ModelRunner> runner_;
  int free_blocks_ = 0;
};

TEST_F(GeneratorTest, BatchedGreedyEqualsOneAtATime) {
  std::vector<GenerationRequest> reqs = {Request("Hello there", 12), Request("The sky is", 7),
                                         Request("1 2 3 4 5 6 7 8", 10)};
  const auto together = Run(reqs);
  ASSERT_EQ(together.size(), 3u);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto alone = Run({reqs[i]});
    ASSERT_EQ(alone.size(), 1u);
    EXPECT_EQ(together[i].tokens, alone[0].tokens) << "request " << i;
    EXPECT_EQ(together[i].text, alone[0].text);
    EXPECT_EQ(together[i].tokens.size(), static_cast<size_t>(reqs[i].params.max_tokens));
    EXPECT_EQ(together[i].finish_reason, FinishReason::kLength);
    EXPECT_EQ(together[i].text, model_->tokenizer.Decode(together[i].tokens));
  }
}

// A prompt longer than one pass prefills in chunks (each attending to the KV the earlier ones
// cached): same tokens as one pass, for chunk sizes that split it evenly, unevenly and not at all.
TEST_F(GeneratorTest, ChunkedPrefillEqualsOnePass) {
  GenerationRequest req = Request("one two three four five six seven eight nine ten eleven", 9);
  ASSERT_GT(req.prompt.size(), 6u);
  const auto run = [&](int chunk) {
    GeneratorOptions go;
    go.prefill_chunk_tokens = chunk;
    Generator g(*runner_, model_->tokenizer, model_->config.eos_token_ids, go);
    auto r = g.Generate(std::span(&req, 1));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? (*r)[0].tokens : std::vector<int32_t>{};
  };
  const std::vector<int32_t> whole = run(0);
  ASSERT_EQ(whole.size(), 9u);
  const int n = static_cast<int>(req.prompt.size());
  for (int chunk : {1, 3, n / 2, n - 1, n, n + 5})
    EXPECT_EQ(run(chunk), whole) << "chunk " << chunk;
}

TEST_F(GeneratorTest, SeededSamplingIsReproducibleAndSeedDependent) {
  GenerationRequest r = Request("Once upon a time", 16, 1.0f);
  r.params.seed = 42;
  const auto a = Run({r});
  const auto b = Run({r});
  r.params.seed = 43;
  const auto c = Run({r});
  EXPECT_EQ(a[0].tokens, b[0].tokens);
  EXPECT_NE(a[0].tokens, c[0].tokens);
}

TEST_F(GeneratorTest, StopStringCutsTheTextAndStreamsOnlyWhatPrecedesIt) {
  const auto free_run = Run({Request("abc def", 24)});
  const std::string& text = free_run[0].text;
  ASSERT_GE(text.size(), 6u);
  const std::string stop = text.substr(text.size() / 2, 3);
  GenerationRequest r = Request("abc def", 24);
  r.params.stop = {stop};
  std::string streamed;
  Generator g(*runner_, model_->tokenizer, model_->config.eos_token_ids);
  auto res = g.Generate(std::span(&r, 1), [&](size_t, std::string_view t) { streamed += t; });
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ((*res)[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ((*res)[0].text, text.substr(0, text.find(stop)));
  EXPECT_EQ(streamed, (*res)[0].text);
}

TEST_F(GeneratorTest, StopTokenIdEndsTheSequence) {
  const auto free_run = Run({Request("stop here", 10)});
  GenerationRequest r = Request("stop here", 10);
  r.params.stop_token_ids = {free_run[0].tokens[4]};
  const auto res = Run({r});
  EXPECT_EQ(res[0].finish_reason, FinishReason::kStop);
  const auto& t = free_run[0].tokens;
  const size_t first = std::find(t.begin(), t.end(), t[4]) - t.begin();
  EXPECT_EQ(res[0].tokens, std::vector<int32_t>(t.begin(), t.begin() + first));
}

TEST_F(GeneratorTest, InvalidRequestsFailBeforeAnyWork) {
  Generator g(*runner_, model_->tokenizer, model_->config.eos_token_ids);
  GenerationRequest empty = Request("", 4);
  EXPECT_EQ(g.Generate(std::span(&empty, 1)).status().code(), absl::StatusCode::kInvalidArgument);
  GenerationRequest long_prompt = Request("x", 4);
  long_prompt.prompt.assign(model_->config.max_context, 1);
  auto s = g.Generate(std::span(&long_prompt, 1)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("context"), std::string::npos) << s;
  GenerationRequest bad_temp = Request("hi", 4, 5.0f);
  EXPECT_EQ(g.Generate(std::span(&bad_temp, 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  GenerationRequest huge = Request("hi", 100000);
  std::vector<GenerationRequest> many(4, huge);
  EXPECT_EQ(g.Generate(many).status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace dq
