// The speculative acceptance rule keeps the target's distribution: chi-square tests over many
// seeded draws against fixed target distributions (deterministic: fixed seeds). The critical
// value is chi2(df = 5, p = 0.001) = 20.5; the wrong rules below score in the thousands.
#include "engine/spec/rejection_sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/sampler/sampler.h"

namespace dq {
namespace {

constexpr int kDraws = 200000;
constexpr double kChi2Df5P001 = 20.515;

const std::vector<float> kP = {0.05f, 0.30f, 0.10f, 0.25f, 0.20f, 0.10f};  // target
const std::vector<float> kQ = {0.30f, 0.05f, 0.25f, 0.10f, 0.10f, 0.20f};  // drafter

double ChiSquare(const std::vector<int>& counts, const std::vector<float>& expected_p) {
  double chi2 = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = expected_p[i] * kDraws;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi2;
}

int DrawFrom(const std::vector<float>& dist, std::mt19937_64& rng) {
  std::discrete_distribution<int> d(dist.begin(), dist.end());
  return d(rng);
}

TEST(RejectionSamplerTest, EmittedTokensFollowTheTargetNotTheDrafter) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int> emitted(kP.size()), always_accept(kP.size());
  int accepted = 0;
  for (int i = 0; i < kDraws; ++i) {
    const int x = DrawFrom(kQ, rng);
    const RejectionResult r = RejectionSample(kP, kQ, x, u(rng), u(rng));
    ++emitted[r.token];
    accepted += r.accepted;
    ++always_accept[x];  // the wrong rule: trust the drafter
  }
  EXPECT_LT(ChiSquare(emitted, kP), kChi2Df5P001);
  EXPECT_GT(ChiSquare(always_accept, kP), 1000.0);
  // P(accept) = sum_x min(p, q) = 0.05+0.05+0.10+0.10+0.10+0.10 = 0.5.
  EXPECT_NEAR(static_cast<double>(accepted) / kDraws, 0.5, 0.01);
}

TEST(RejectionSamplerTest, PointMassRuleKeepsTheTarget) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int> emitted(kP.size()), resample_from_p(kP.size());
  for (int i = 0; i < kDraws; ++i) {
    const int x = 3;  // a deterministic drafter always guessing token 3
    ++emitted[RejectionSamplePointMass(kP, x, u(rng), u(rng)).token];
    // The wrong rule: on rejection resample from p itself (x not removed) over-weights x.
    ++resample_from_p[u(rng) < kP[x] ? x : DrawFrom(kP, rng)];
  }
  EXPECT_LT(ChiSquare(emitted, kP), kChi2Df5P001);
  EXPECT_GT(ChiSquare(resample_from_p, kP), 1000.0);
}

// What the generator does for point-mass drafts: the request's Sampler draws y from the
// processed distribution (here temperature 0.7 and top-k 4) and the draft is kept iff y == x.
// The emitted token must follow that processed distribution, computed independently here.
TEST(RejectionSamplerTest, SampleAndCompareWithTheSamplerKeepsItsDistribution) {
  const std::vector<float> logits = {1.0f, 2.5f, 0.2f, 2.0f, 1.7f, -1.0f, 0.5f};
  SamplingParams params;
  params.temperature = 0.7f;
  params.top_k = 4;
  params.seed = 5;
  std::vector<float> expected(logits.size(), 0.0f);
  double z = 0.0;
  for (int id : {1, 3, 4, 0}) z += std::exp(logits[id] / 0.7);  // the top 4
  for (int id : {1, 3, 4, 0}) expected[id] = static_cast<float>(std::exp(logits[id] / 0.7) / z);
  Sampler sampler(params);
  std::vector<int> emitted(logits.size());
  int kept = 0;
  for (int i = 0; i < kDraws; ++i) {
    std::vector<float> row = logits;
    const int32_t y = sampler.Sample(row);
    ++emitted[y];
    kept += (y == 3);
  }
  double chi2 = 0.0;
  for (int id : {1, 3, 4, 0}) {
    const double e = expected[id] * kDraws;
    chi2 += (emitted[id] - e) * (emitted[id] - e) / e;
  }
  EXPECT_LT(chi2, 16.27);  // chi2(df = 3, p = 0.001)
  EXPECT_EQ(emitted[2] + emitted[5] + emitted[6], 0);
  EXPECT_NEAR(static_cast<double>(kept) / kDraws, expected[3], 0.005);
}

}  // namespace
}  // namespace dq
