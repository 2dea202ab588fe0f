#include "engine/sampler/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace dq {
namespace {

SamplingParams Params(float temperature, uint64_t seed = 1234) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  return p;
}

std::vector<float> LogitsFromProbs(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// Draws `n` tokens (fresh copy of the logits each time) and returns the count per token id.
std::map<int32_t, int> Histogram(Sampler& s, const std::vector<float>& logits, int n) {
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) {
    std::vector<float> scratch = logits;
    ++h[s.Sample(scratch)];
  }
  return h;
}

// Pearson's chi-square of observed counts against `expected` probabilities (tokens with 0
// expected probability must never appear).
double ChiSquare(const std::map<int32_t, int>& observed, const std::map<int32_t, double>& expected,
                 int n) {
  double chi2 = 0.0;
  for (const auto& [tok, count] : observed) {
    EXPECT_TRUE(expected.count(tok)) << "token " << tok << " drawn but should be excluded";
  }
  for (const auto& [tok, p] : expected) {
    const double e = p * n;
    const auto it = observed.find(tok);
    const double o = it == observed.end() ? 0.0 : it->second;
    chi2 += (o - e) * (o - e) / e;
  }
  return chi2;
}

std::vector<float> RandomLogits(size_t n, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> l(n);
  for (float& x : l) x = d(rng);
  return l;
}

TEST(SamplerTest, GreedyIsArgmaxWithLowestIndexTieBreak) {
  Sampler s(Params(0.0f));
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
  EXPECT_EQ(s.Sample(logits), 1);
  std::vector<float> all_equal(7, 0.25f);
  EXPECT_EQ(s.Sample(all_equal), 0);
  std::vector<float> with_nan = {NAN, 1.0f, 3.0f, NAN};
  EXPECT_EQ(s.Sample(with_nan), 2);
}

TEST(SamplerTest, SeededSamplingIsReproducible) {
  const std::vector<float> logits = RandomLogits(1000, 7, 1.0f);
  SamplingParams p = Params(1.0f, 42);
  p.top_p = 0.9f;
  Sampler a(p), b(p);
  Sampler c(Params(1.0f, 43));
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 200; ++i) {
    std::vector<float> x = logits, y = logits, z = logits;
    ta.push_back(a.Sample(x));
    tb.push_back(b.Sample(y));
    tc.push_back(c.Sample(z));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
  EXPECT_EQ(a.draws(), 200u);
}

TEST(SamplerTest, DrawDependsOnlyOnSeedAndStepNotOnOtherWork) {
  // The k-th draw of a seed is the same whether or not other samplers ran in between (a batch
  // of other sequences) and whatever paths the earlier draws took.
  const std::vector<float> logits = RandomLogits(500, 9, 1.0f);
  Sampler alone(Params(0.8f, 5));
  Sampler batched(Params(0.8f, 5));
  Sampler other(Params(1.0f, 6));
  for (int i = 0; i < 50; ++i) {
    std::vector<float> x = logits, y = logits, z = logits;
    other.Sample(z);
    EXPECT_EQ(alone.Sample(x), batched.Sample(y));
  }
}

TEST(SamplerTest, TopKOneEqualsGreedy) {
  SamplingParams p = Params(1.5f);
  p.top_k = 1;
  Sampler s(p);
  Sampler greedy(Params(0.0f));
  for (uint64_t seed = 0; seed < 50; ++seed) {
    std::vector<float> logits = RandomLogits(2000, seed);
    std::vector<float> copy = logits;
    EXPECT_EQ(s.Sample(logits), greedy.Sample(copy));
  }
}

TEST(SamplerTest, FullDistributionMatchesSoftmax) {
  const std::vector<double> probs = {0.4, 0.3, 0.2, 0.1};
  Sampler s(Params(1.0f, 11));
  const int n = 20000;
  auto h = Histogram(s, LogitsFromProbs(probs), n);
  EXPECT_LT(ChiSquare(h, {{0, 0.4}, {1, 0.3}, {2, 0.2}, {3, 0.1}}, n), 25.0);
}

TEST(SamplerTest, TemperatureSharpens) {
  // p^(1/T) renormalised: T = 0.5 squares the probabilities.
  const std::vector<double> probs = {0.5, 0.3, 0.2};
  Sampler s(Params(0.5f, 12));
  const int n = 20000;
  auto h = Histogram(s, LogitsFromProbs(probs), n);
  const double z = 0.25 + 0.09 + 0.04;
  EXPECT_LT(ChiSquare(h, {{0, 0.25 / z}, {1, 0.09 / z}, {2, 0.04 / z}}, n), 25.0);
}

TEST(SamplerTest, TopKRestrictsAndRenormalises) {
  const std::vector<double> probs = {0.1, 0.4, 0.05, 0.3, 0.15};
  SamplingParams p = Params(1.0f, 13);
  p.top_k = 2;
  Sampler s(p);
  const int n = 20000;
  auto h = Histogram(s, LogitsFromProbs(probs), n);
  EXPECT_LT(ChiSquare(h, {{1, 4.0 / 7}, {3, 3.0 / 7}}, n), 25.0);
}

TEST(SamplerTest, TopPKeepsSmallestNucleus) {
  // Sorted: 0.5, 0.25, 0.15, 0.1. Mass before each: 0, 0.5, 0.75, 0.9. top_p = 0.7 keeps the
  // first two (0.75 >= 0.7 stops), renormalised to 2/3, 1/3.
  const std::vector<double> probs = {0.15, 0.5, 0.1, 0.25};
  SamplingParams p = Params(1.0f, 14);
  p.top_p = 0.7f;
  Sampler s(p);
  const int n = 20000;
  auto h = Histogram(s, LogitsFromProbs(probs), n);
  EXPECT_LT(ChiSquare(h, {{1, 2.0 / 3}, {3, 1.0 / 3}}, n), 25.0);
}

TEST(SamplerTest, TopPAlwaysKeepsAtLeastOne) {
  SamplingParams p = Params(1.0f, 15);
  p.top_p = 0.01f;
  Sampler s(p);
  auto h = Histogram(s, LogitsFromProbs({0.2, 0.3, 0.5}), 500);
  EXPECT_EQ(h.size(), 1u);
  EXPECT_EQ(h.begin()->first, 2);
}

TEST(SamplerTest, TopPOnLargeNucleusMatchesBruteForce) {
  // A nucleus of thousands of tokens exercises the chunked partial sort past its first chunk.
  const size_t vocab = 20000;
  const std::vector<float> logits = RandomLogits(vocab, 16, 0.5f);
  const float top_p = 0.6f;
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  double total = 0.0;
  for (float l : logits) total += std::exp(static_cast<double>(l));
  std::set<int32_t> nucleus;
  double cum = 0.0;
  for (int32_t id : order) {
    if (cum >= top_p * total) break;
    nucleus.insert(id);
    cum += std::exp(static_cast<double>(logits[id]));
  }
  ASSERT_GT(nucleus.size(), 2000u);
  SamplingParams p = Params(1.0f, 17);
  p.top_p = top_p;
  Sampler s(p);
  std::set<int32_t> drawn;
  for (int i = 0; i < 1000; ++i) {
    std::vector<float> x = logits;
    const int32_t t = s.Sample(x);
    ASSERT_TRUE(nucleus.count(t)) << "token " << t << " is outside the nucleus";
    drawn.insert(t);
  }
  EXPECT_GT(drawn.size(), 500u);  // it really samples across the nucleus
}

TEST(SamplerTest, TopPOnFlatDistributionBreaksTiesByLowestId) {
  // 5000 equal logits, top_p = 0.5: the nucleus is exactly ids [0, 2500).
  const std::vector<float> logits(5000, 0.25f);
  SamplingParams p = Params(1.0f, 23);
  p.top_p = 0.5f;
  Sampler s(p);
  int32_t max_drawn = 0;
  for (int i = 0; i < 2000; ++i) {
    std::vector<float> x = logits;
    max_drawn = std::max(max_drawn, s.Sample(x));
  }
  EXPECT_LT(max_drawn, 2500);
  EXPECT_GT(max_drawn, 2400);
}

TEST(SamplerTest, MinPDropsTokensBelowFractionOfMax) {
  // max p = 0.5, min_p = 0.15 -> threshold 0.075: keeps 0.5, 0.3, 0.1; drops 0.06, 0.04.
  const std::vector<double> probs = {0.06, 0.5, 0.04, 0.3, 0.1};
  SamplingParams p = Params(1.0f, 18);
  p.min_p = 0.15f;
  Sampler s(p);
  const int n = 20000;
  auto h = Histogram(s, LogitsFromProbs(probs), n);
  EXPECT_LT(ChiSquare(h, {{1, 0.5 / 0.9}, {3, 0.3 / 0.9}, {4, 0.1 / 0.9}}, n), 25.0);
}

TEST(SamplerTest, MinPWithTopPAndTopK) {
  const std::vector<double> probs = {0.06, 0.5, 0.04, 0.3, 0.1};
  SamplingParams p = Params(1.0f, 19);
  p.min_p = 0.15f;
  p.top_p = 0.95f;  // keeps 0.5, 0.3, 0.1, 0.06 (mass before 0.04 is 0.96)
  p.top_k = 4;
  Sampler s(p);
  const int n = 20000;
  auto h = Histogram(s, LogitsFromProbs(probs), n);
  EXPECT_LT(ChiSquare(h, {{1, 0.5 / 0.9}, {3, 0.3 / 0.9}, {4, 0.1 / 0.9}}, n), 25.0);
}

TEST(SamplerTest, PresenceAndFrequencyPenaltiesChangeOnlyGeneratedTokens) {
  SamplingParams p = Params(0.0f);
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p);
  s.Accept(3);
  s.Accept(3);
  s.Accept(5);
  EXPECT_EQ(s.Count(3), 2);
  EXPECT_EQ(s.Count(4), 0);
  std::vector<float> logits(8, 1.0f);
  s.ApplyPenalties(logits);
  for (int i = 0; i < 8; ++i) {
    const float want = i == 3 ? 1.0f - 0.5f - 0.5f : i == 5 ? 1.0f - 0.5f - 0.25f : 1.0f;
    EXPECT_FLOAT_EQ(logits[i], want) << "token " << i;
  }
}

TEST(SamplerTest, PenaltiesSteerGreedySampling) {
  SamplingParams p = Params(0.0f);
  p.frequency_penalty = 1.0f;
  Sampler s(p);
  const std::vector<float> logits = {2.0f, 1.5f, 0.0f};
  std::vector<int32_t> tokens;
  for (int i = 0; i < 3; ++i) {
    std::vector<float> x = logits;
    tokens.push_back(s.Sample(x));
    s.Accept(tokens.back());
  }
  // 2.0 -> picked; then 1.0 vs 1.5 -> 1; then 1.0 vs 0.5 -> 0.
  EXPECT_EQ(tokens, (std::vector<int32_t>{0, 1, 0}));
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  SamplingParams p = Params(0.0f);
  p.repetition_penalty = 2.0f;
  Sampler s(p);
  s.Accept(0);
  s.Accept(1);
  std::vector<float> logits = {3.0f, -1.0f, 3.0f};
  s.ApplyPenalties(logits);
  EXPECT_FLOAT_EQ(logits[0], 1.5f);
  EXPECT_FLOAT_EQ(logits[1], -2.0f);
  EXPECT_FLOAT_EQ(logits[2], 3.0f);
}

TEST(SamplerTest, NonFiniteLogits) {
  Sampler s(Params(1.0f));
  const float inf = INFINITY;
  std::vector<float> all_masked(5, -inf);
  EXPECT_EQ(s.Sample(all_masked), 0);
  std::vector<float> masked = {-inf, -inf, 0.0f, -inf};
  EXPECT_EQ(s.Sample(masked), 2);
  std::vector<float> pos_inf = {0.0f, inf, 1.0f};
  EXPECT_EQ(s.Sample(pos_inf), 1);
}

TEST(SamplerTest, LargeVocabAllPaths) {
  const std::vector<float> logits = RandomLogits(151936, 20);
  for (int mode = 0; mode < 4; ++mode) {
    SamplingParams p = Params(0.7f, 21);
    if (mode & 1) p.top_k = 50;
    if (mode & 2) p.top_p = 0.9f;
    p.min_p = 0.01f;
    Sampler s(p);
    for (int i = 0; i < 20; ++i) {
      std::vector<float> x = logits;
      const int32_t t = s.Sample(x);
      ASSERT_GE(t, 0);
      ASSERT_LT(t, 151936);
    }
  }
}

// The draw of the sorted path (top-k/top-p) is in id order over the kept set, as the device
// kernels draw: a brute-force reference (full sort, nucleus by prefix mass, min-p, then the first
// id whose prefix exceeds u * total) picks the same token for the same u.
TEST(SamplerTest, SortedPathDrawsInIdOrderOverTheKeptSet) {
  const std::vector<float> raw = RandomLogits(3000, 41, 2.0f);
  struct Mode {
    int top_k;
    float top_p, min_p;
  };
  // Small kept sets (sorted by id) and large ones (scattered over the vocabulary) alike.
  for (const Mode md : {Mode{0, 0.9f, 0.0f}, Mode{50, 1.0f, 0.0f}, Mode{200, 0.8f, 0.02f},
                        Mode{0, 0.5f, 0.1f}, Mode{2999, 1.0f, 0.0f}, Mode{0, 0.999f, 0.0f}}) {
    SamplingParams p = Params(0.8f, 99);
    p.top_k = md.top_k;
    p.top_p = md.top_p;
    p.min_p = md.min_p;
    Sampler sampler(p), twin(p);
    std::vector<float> l = raw;
    for (float& x : l) x *= 1.0f / p.temperature;
    std::vector<int32_t> ids(l.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::sort(ids.begin(), ids.end(),
              [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    const size_t k = md.top_k > 0 ? static_cast<size_t>(md.top_k) : ids.size();
    const float m = l[ids[0]];
    double total = 0.0;
    for (size_t j = 0; j < k; ++j) total += std::exp(l[ids[j]] - m);
    std::vector<float> kept(l.size(), 0.0f);
    double before = 0.0;
    for (size_t j = 0; j < k && !(md.top_p < 1.0f && before >= md.top_p * total); ++j) {
      const float v = std::exp(l[ids[j]] - m);
      before += v;
      if (v >= md.min_p) kept[ids[j]] = v;
    }
    const double sum = std::accumulate(kept.begin(), kept.end(), 0.0);
    for (int step = 0; step < 50; ++step) {
      std::vector<float> x = raw;
      const int32_t got = sampler.Sample(x);
      const double target = twin.DrawUniform() * sum;
      int32_t expected = -1;
      double acc = 0.0;
      for (size_t i = 0; i < kept.size() && expected < 0; ++i) {
        acc += kept[i];
        if (kept[i] > 0.0f && acc > target) expected = static_cast<int32_t>(i);
      }
      ASSERT_EQ(got, expected) << "top_k " << md.top_k << " top_p " << md.top_p << " min_p "
                               << md.min_p << " step " << step;
    }
  }
}

// Over n equal logits at temperature 1 the draw is token floor(u * n) exactly (each probability
// is exp(0) = 1, summed exactly in double), so a token reveals the uniform Sample() used.
TEST(SamplerTest, DrawUniformIsTheNumberSampleWouldUse) {
  constexpr int kVocab = 1 << 12;
  Sampler sampling(Params(1.0f, 77)), drawing(Params(1.0f, 77));
  for (int step = 0; step < 200; ++step) {
    std::vector<float> flat(kVocab, 0.0f);
    const int32_t token = sampling.Sample(flat);
    const double u = drawing.DrawUniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ASSERT_EQ(token, static_cast<int32_t>(u * kVocab)) << "step " << step;
    ASSERT_EQ(sampling.draws(), drawing.draws());
  }
}

// Greedy, unsorted and sorted paths each take exactly one number per Sample(), like
// DrawUniform(): a sequence that mixes host and device steps keeps the stream of one that
// samples on the host throughout.
TEST(SamplerTest, DrawUniformKeepsTheStreamOnEveryPath) {
  const std::vector<float> logits = RandomLogits(5000, 31, 1.0f);
  for (int mode = 0; mode < 4; ++mode) {
    SamplingParams p = Params(mode == 0 ? 0.0f : 0.8f, 55);
    if (mode == 2) p.top_p = 0.9f;
    if (mode == 3) p.top_k = 40;
    Sampler host_only(p), mixed(p);
    for (int step = 0; step < 60; ++step) {
      std::vector<float> a = logits;
      const int32_t expected = host_only.Sample(a);
      if (step % 3 == 1) {
        mixed.DrawUniform();  // this step's token was drawn on the device
      } else {
        std::vector<float> b = logits;
        ASSERT_EQ(mixed.Sample(b), expected) << "mode " << mode << " step " << step;
      }
      ASSERT_EQ(mixed.draws(), host_only.draws()) << "mode " << mode << " step " << step;
      ASSERT_EQ(host_only.draws(), static_cast<uint64_t>(step + 1));
    }
  }
}

TEST(SamplerTest, DrawUniformContinuesAResumedStream) {
  Sampler first(Params(1.0f, 9)), resumed(Params(1.0f, 9));
  first.DrawUniform();
  first.DrawUniform();
  resumed.ResumeAfter(2);
  EXPECT_EQ(first.DrawUniform(), resumed.DrawUniform());
  EXPECT_EQ(resumed.draws(), 3u);
}

TEST(SamplerTest, DeviceSamplableOnlyWithoutPenalties) {
  SamplingParams p = Params(0.7f);
  p.top_k = 20;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  Sampler plain(p);
  EXPECT_TRUE(plain.DeviceSamplable());
  EXPECT_EQ(plain.draws(), 0u);  // a pure check: nothing drawn
  SamplingParams presence = p, frequency = p, repetition = p;
  presence.presence_penalty = 0.5f;
  frequency.frequency_penalty = -0.1f;
  repetition.repetition_penalty = 1.1f;
  EXPECT_FALSE(Sampler(presence).DeviceSamplable());
  EXPECT_FALSE(Sampler(frequency).DeviceSamplable());
  EXPECT_FALSE(Sampler(repetition).DeviceSamplable());
}

TEST(LogprobsTest, LogSoftmaxAndTopLogprobs) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -5.0f};
  double z = 0.0;
  for (float l : logits) z += std::exp(l);
  EXPECT_NEAR(LogSumExp(logits), std::log(z), 1e-5);
  EXPECT_NEAR(LogSoftmaxAt(logits, 2), 2.0 - std::log(z), 1e-5);
  const std::vector<TokenLogprob> top = TopLogprobs(logits, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].token, 1);  // tie with 3: lower id first
  EXPECT_EQ(top[1].token, 3);
  EXPECT_EQ(top[2].token, 2);
  EXPECT_NEAR(top[0].logprob, 3.0 - std::log(z), 1e-5);
  EXPECT_EQ(TopLogprobs(logits, 0).size(), 0u);
  EXPECT_EQ(TopLogprobs(logits, 100).size(), 5u);
  // Probabilities over the whole vocabulary add up to 1.
  const std::vector<float> big = RandomLogits(50000, 22);
  double total = 0.0;
  for (const TokenLogprob& t : TopLogprobs(big, 50000)) total += std::exp(t.logprob);
  EXPECT_NEAR(total, 1.0, 1e-3);
}

TEST(ValidateTest, AcceptsDefaultsAndRejectsOutOfRange) {
  const int vocab = 1000;
  EXPECT_TRUE(Validate(SamplingParams{}, vocab).ok());
  auto error_of = [&](auto mutate) {
    SamplingParams p;
    mutate(p);
    absl::Status s = Validate(p, vocab);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    return std::string(s.message());
  };
  EXPECT_EQ(error_of([](SamplingParams& p) { p.temperature = 3; }),
            "temperature must be in [0, 2], got 3");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.temperature = -0.5f; }),
            "temperature must be in [0, 2], got -0.5");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.temperature = NAN; }),
            "temperature must be in [0, 2], got nan");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.top_p = 0; }), "top_p must be in (0, 1], got 0");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.top_p = 1.5f; }),
            "top_p must be in (0, 1], got 1.5");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.top_k = -2; }),
            "top_k must be 0 or -1 (off) or in [1, 1000], got -2");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.min_p = 2; }), "min_p must be in [0, 1], got 2");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.presence_penalty = 2.5f; }),
            "presence_penalty must be in [-2, 2], got 2.5");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.frequency_penalty = -3; }),
            "frequency_penalty must be in [-2, 2], got -3");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.repetition_penalty = 0; }),
            "repetition_penalty must be in (0, 2], got 0");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.max_tokens = 0; }),
            "max_tokens must be at least 1, got 0");
  EXPECT_NE(error_of([](SamplingParams& p) {
              p.stop_token_ids = {1, 1000};
            }).find("stop_token_ids[1] = 1000"),
            std::string::npos);
  EXPECT_EQ(error_of([](SamplingParams& p) {
              p.stop = {"a", ""};
            }),
            "stop[1] is empty; stop strings must be non-empty");
  SamplingParams ok;
  ok.top_k = -1;
  ok.temperature = 0;
  ok.top_p = 1;
  ok.seed = 0;
  EXPECT_TRUE(Validate(ok, vocab).ok());
  EXPECT_FALSE(Validate(ok, 0).ok());
}

}  // namespace
}  // namespace dq
