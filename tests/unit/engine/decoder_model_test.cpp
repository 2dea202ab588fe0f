// Forward-pass invariants on the tiny Qwen3: chunking, batching and paging change nothing.
#include <gtest/gtest.h>

#include <random>

#include "common/dtype.h"
#include "engine/model/model_runner.h"
#include "tests/unit/engine/tiny_model.h"

namespace dq {
namespace {

class DecoderModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::LoadTinyQwen3();
    ASSERT_NE(model_, nullptr);
    ModelRunnerOptions o;
    o.threads = 2;
    o.kv_block_size = 4;  // small blocks: sequences span many, out of order after churn
    o.kv_capacity = 512;
    auto r = ModelRunner::Create(*model_->checkpoint, model_->config, o);
    ASSERT_TRUE(r.ok()) << r.status();
    runner_ = std::move(*r);
  }

  std::vector<int32_t> RandomTokens(int n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> d(0, model_->config.vocab_size - 1);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = d(rng);
    return t;
  }

  // Runs `tokens` in chunks of the given sizes; returns the last position's logits.
  std::vector<float> RunChunked(const std::vector<int32_t>& tokens, std::vector<int> chunks) {
    KvSequence seq;
    KvBlockPool& pool = runner_->kv_pool();
    pool.extend(seq, static_cast<int>(tokens.size()));
    BatchLogits logits;
    size_t at = 0;
    for (int c : chunks) {
      Batch b{Phase::kPrefill, {{&seq, std::span(tokens).subspan(at, c), false}}};
      EXPECT_TRUE(runner_->Forward(b, &logits).ok());
      at += c;
    }
    EXPECT_EQ(at, tokens.size());
    pool.release(seq);
    return {logits.row(0), logits.row(0) + logits.vocab};
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<ModelRunner> runner_;
};

TEST_F(DecoderModelTest, ChunkedPrefillAndDecodeMatchOneShotPrefill) {
  const std::vector<int32_t> tokens = RandomTokens(37, 1);
  const std::vector<float> one_shot = RunChunked(tokens, {37});
  const std::vector<float> chunked = RunChunked(tokens, {20, 9, 5, 1, 1, 1});
  ASSERT_EQ(one_shot.size(), chunked.size());
  float max_diff = 0;
  for (size_t i = 0; i < one_shot.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(one_shot[i] - chunked[i]));
  }
  EXPECT_LT(max_diff, 1e-3f);
}

TEST_F(DecoderModelTest, BatchedDecodeEqualsSequentialDecodeExactly) {
  KvBlockPool& pool = runner_->kv_pool();
  const int n = 3;
  std::vector<KvSequence> seqs(n);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n; ++i) prompts.push_back(RandomTokens(5 + 4 * i, 10 + i));
  BatchLogits logits;
  for (int i = 0; i < n; ++i) {
    pool.extend(seqs[i], static_cast<int>(prompts[i].size()) + 1);
    Batch prefill{Phase::kPrefill, {{&seqs[i], prompts[i], false}}};
    ASSERT_TRUE(runner_->Forward(prefill, &logits).ok());
  }
  // One decode step for all three together must give each exactly what it gets alone:
  // a request's tokens never depend on who shares its batch.
  const std::vector<int32_t> next = {7, 8, 9};
  Batch decode{Phase::kDecode, {}};
  for (int i = 0; i < n; ++i) decode.items.push_back({&seqs[i], std::span(&next[i], 1), false});
  ASSERT_TRUE(runner_->Forward(decode, &logits).ok());
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> all = prompts[i];
    all.push_back(next[i]);
    const std::vector<float> alone = RunChunked(all, {static_cast<int>(prompts[i].size()), 1});
    const float* batched = logits.last(i, decode);
    for (size_t v = 0; v < alone.size(); ++v) ASSERT_EQ(batched[v], alone[v]) << i << " " << v;
  }
  for (auto& s : seqs) pool.release(s);
}

TEST_F(DecoderModelTest, MixedPrefillBatchMatchesSeparatePrefills) {
  KvBlockPool& pool = runner_->kv_pool();
  std::vector<KvSequence> seqs(2);
  const std::vector<int32_t> a = RandomTokens(6, 21), b = RandomTokens(11, 22);
  pool.extend(seqs[0], 6);
  pool.extend(seqs[1], 11);
  Batch mixed{Phase::kPrefill, {{&seqs[0], a, false}, {&seqs[1], b, false}}};
  BatchLogits logits;
  ASSERT_TRUE(runner_->Forward(mixed, &logits).ok());
  for (int i = 0; i < 2; ++i) {
    const auto& p = i == 0 ? a : b;
    const std::vector<float> alone = RunChunked(p, {static_cast<int>(p.size())});
    float max_diff = 0;
    for (size_t v = 0; v < alone.size(); ++v) {
      max_diff = std::max(max_diff, std::abs(logits.last(i, mixed)[v] - alone[v]));
    }
    EXPECT_LT(max_diff, 1e-3f) << "item " << i;
  }
  for (auto& s : seqs) pool.release(s);
}

TEST_F(DecoderModelTest, AllLogitsRowsMatchPerPositionRuns) {
  const std::vector<int32_t> tokens = RandomTokens(12, 3);
  KvSequence seq;
  runner_->kv_pool().extend(seq, 12);
  Batch b{Phase::kPrefill, {{&seq, tokens, true}}};
  BatchLogits logits;
  ASSERT_TRUE(runner_->Forward(b, &logits).ok());
  runner_->kv_pool().release(seq);
  for (int p : {0, 5, 11}) {
    std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + p + 1);
    const std::vector<float> ref = RunChunked(prefix, {p + 1});
    float max_diff = 0;
    for (size_t v = 0; v < ref.size(); ++v) {
      max_diff = std::max(max_diff, std::abs(logits.row(p)[v] - ref[v]));
    }
    EXPECT_LT(max_diff, 1e-3f) << "position " << p;
  }
}

TEST_F(DecoderModelTest, RejectsBadBatchesWithClearErrors) {
  KvSequence seq;
  runner_->kv_pool().extend(seq, 4);
  BatchLogits logits;
  const std::vector<int32_t> bad_id = {1, model_->config.vocab_size};
  absl::Status s = runner_->Forward(Batch{Phase::kPrefill, {{&seq, bad_id, false}}}, &logits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos);
  const std::vector<int32_t> too_many(5, 1);
  s = runner_->Forward(Batch{Phase::kPrefill, {{&seq, too_many, false}}}, &logits);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(seq.num_tokens, 0);
  runner_->kv_pool().release(seq);
}

bool IsBf16(float x) { return BF16ToF32(F32ToBF16(x)) == x; }

// DecoderModelOptions::bf16_activations (the GPU tests' reference): every linear's input and
// every K/V the pass writes is a bf16 value, as in the CUDA backend's buffers, and the logits
// move by bf16 rounding only. Without it neither holds, so the check sees the option work.
TEST(DecoderModelBf16Activations, LinearInputsAndKvAreBf16AndLogitsStayClose) {
  std::unique_ptr<Model> m = testing::LoadTinyQwen3();
  ASSERT_NE(m, nullptr);
  std::mt19937 rng(std::random_device{}());
  std::vector<int32_t> tokens(29);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % m->config.vocab_size);
  struct Run {
    std::vector<float> logits;
    int64_t inputs = 0, non_bf16_inputs = 0, kv = 0, non_bf16_kv = 0;
  };
  auto run = [&](bool bf16) {
    ModelRunnerOptions o;
    o.threads = 2;
    o.kv_capacity = 64;
    o.cpu_bf16_activations = bf16;
    auto r = ModelRunner::Create(*m->checkpoint, m->config, o);
    EXPECT_TRUE(r.ok()) << r.status();
    Run out;
    if (!r.ok()) return out;
    ModelRunner& runner = **r;
    EXPECT_TRUE(
        runner
            .SetPrefillObserver([&](int, LinearInput, const float* x, int64_t rows, int64_t n) {
              for (int64_t i = 0; i < rows * n; ++i) out.non_bf16_inputs += !IsBf16(x[i]);
              out.inputs += rows * n;
            })
            .ok());
    KvSequence seq;
    runner.kv_pool().extend(seq, static_cast<int>(tokens.size()));
    BatchLogits logits;
    EXPECT_TRUE(runner.Forward(Batch{Phase::kPrefill, {{&seq, tokens, true}}}, &logits).ok());
    const int kv_dim = m->config.num_kv_heads * m->config.head_dim;
    for (int layer = 0; layer < m->config.num_layers; ++layer) {
      for (int p = 0; p < static_cast<int>(tokens.size()); ++p) {
        const int32_t block = seq.blocks[p / runner.kv_pool().block_size()];
        const int slot = p % runner.kv_pool().block_size();
        for (const float* kv : {runner.kv_pool().key(layer, block, slot),
                                runner.kv_pool().value(layer, block, slot)}) {
          for (int d = 0; d < kv_dim; ++d) out.non_bf16_kv += !IsBf16(kv[d]);
          out.kv += kv_dim;
        }
      }
    }
    out.logits = logits.values;
    runner.kv_pool().release(seq);
    return out;
  };
  const Run plain = run(false), bf16 = run(true);
  ASSERT_GT(bf16.inputs, 0);
  ASSERT_GT(bf16.kv, 0);
  EXPECT_EQ(bf16.non_bf16_inputs, 0);
  EXPECT_EQ(bf16.non_bf16_kv, 0);
  EXPECT_GT(plain.non_bf16_inputs, plain.inputs / 2);  // fp32 values are rarely bf16 ones
  EXPECT_GT(plain.non_bf16_kv, plain.kv / 2);
  ASSERT_EQ(plain.logits.size(), bf16.logits.size());
  double max_diff = 0, max_logit = 0;
  for (size_t i = 0; i < plain.logits.size(); ++i) {
    max_diff = std::max(max_diff, double(std::fabs(plain.logits[i] - bf16.logits[i])));
    max_logit = std::max(max_logit, double(std::fabs(plain.logits[i])));
  }
  EXPECT_GT(max_diff, 0.0);
  EXPECT_LT(max_diff, 0.02 * max_logit + 0.05);
}

}  // namespace
}  // namespace dq
