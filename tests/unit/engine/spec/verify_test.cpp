// The shared verify rule (engine/spec/verify.h): which draft prefix it keeps, that it spends the
// sampler exactly like plain decoding, that it stops where the sequence ends, and the draft
// budget that keeps fed positions inside max_tokens and the KV lease.
#include "engine/spec/verify.h"

#include <gtest/gtest.h>

#include <vector>

namespace dq {
namespace {

constexpr int kVocab = 8;

// One row per entry, each peaked at that token.
std::vector<float> PeakedRows(const std::vector<int32_t>& argmax) {
  std::vector<float> rows(argmax.size() * kVocab, 0.0f);
  for (size_t j = 0; j < argmax.size(); ++j) rows[j * kVocab + argmax[j]] = 5.0f;
  return rows;
}

SamplingParams Greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

struct Emitted {
  std::vector<int32_t> tokens;
  std::vector<int> positions;
};

int VerifyInto(const std::vector<int32_t>& fed, const std::vector<float>& rows, Sampler& sampler,
               Emitted* out, int stop_at = -1) {
  return VerifyDraft(fed, rows.data(), kVocab, sampler, [&](int j, int32_t token) {
    out->positions.push_back(j);
    out->tokens.push_back(token);
    sampler.Accept(token);
    return j != stop_at;
  });
}

TEST(VerifyDraft, KeepsTheAgreeingPrefixThenTheTargetsToken) {
  Sampler s(Greedy());
  Emitted e;
  EXPECT_EQ(VerifyInto({5, 1, 2, 3}, PeakedRows({1, 2, 7, 4}), s, &e), 2);
  EXPECT_EQ(e.tokens, (std::vector<int32_t>{1, 2, 7}));  // 7 replaces the rejected draft 3
  EXPECT_EQ(e.positions, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(s.draws(), 3u);  // one draw per emitted token, as plain decoding
}

TEST(VerifyDraft, AllAcceptedAddsTheBonusToken) {
  Sampler s(Greedy());
  Emitted e;
  EXPECT_EQ(VerifyInto({5, 1, 2}, PeakedRows({1, 2, 4}), s, &e), 2);
  EXPECT_EQ(e.tokens, (std::vector<int32_t>{1, 2, 4}));
}

TEST(VerifyDraft, NoDraftIsOnePlainStep) {
  Sampler s(Greedy());
  Emitted e;
  EXPECT_EQ(VerifyInto({5}, PeakedRows({6}), s, &e), 0);
  EXPECT_EQ(e.tokens, (std::vector<int32_t>{6}));
}

TEST(VerifyDraft, StopsWhereTheSequenceEnds) {
  // The sequence ends on its second token (EOS, max_tokens): nothing after it is emitted,
  // although the draft agreed further.
  Sampler s(Greedy());
  Emitted e;
  EXPECT_EQ(VerifyInto({5, 1, 2, 3}, PeakedRows({1, 2, 3, 4}), s, &e, /*stop_at=*/1), 1);
  EXPECT_EQ(e.tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(s.draws(), 2u);
}

TEST(VerifyDraft, SeededSamplingGivesPlainDecodingsTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1234;
  std::vector<float> rows(4 * kVocab);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>((i * 7) % 5) * 0.4f;
  const std::vector<float> original = rows;
  // Plain decoding: one Sample per row, in order.
  Sampler plain(p);
  std::vector<int32_t> want;
  for (int j = 0; j < 4; ++j) {
    std::vector<float> row(rows.begin() + j * kVocab, rows.begin() + (j + 1) * kVocab);
    want.push_back(plain.Sample(row));
    plain.Accept(want.back());
  }
  // A perfect draft of those tokens keeps all of them; the rows are left as they were.
  Sampler spec(p);
  Emitted e;
  EXPECT_EQ(VerifyInto({0, want[0], want[1], want[2]}, rows, spec, &e), 3);
  EXPECT_EQ(e.tokens, want);
  EXPECT_EQ(spec.draws(), plain.draws());
  EXPECT_EQ(rows, original);
  // A wrong first draft: the first token is still plain decoding's, and nothing more.
  Sampler miss(p);
  Emitted m;
  const int32_t wrong = (want[0] + 1) % kVocab;
  EXPECT_EQ(VerifyInto({0, wrong, want[1]}, rows, miss, &m), 0);
  EXPECT_EQ(m.tokens, std::vector<int32_t>{want[0]});
}

TEST(DraftBudget, BoundedByKMaxTokensAndPositions) {
  EXPECT_EQ(DraftBudget(4, 100, 1, 10, 1000), 4);  // k
  // Emitting draft + 1 tokens must not pass max_tokens: 10 generated of 12 leaves 1 draft.
  EXPECT_EQ(DraftBudget(4, 12, 10, 50, 1000), 1);
  EXPECT_EQ(DraftBudget(4, 12, 11, 50, 1000), 0);
  // Fed positions 50 .. 50 + draft must stay below the limit (the lease's 53 tokens).
  EXPECT_EQ(DraftBudget(4, 100, 1, 50, 53), 2);
  EXPECT_EQ(DraftBudget(4, 100, 1, 52, 53), 0);
  EXPECT_EQ(DraftBudget(4, 100, 1, 60, 53), 0);  // never negative
}

}  // namespace
}  // namespace dq
