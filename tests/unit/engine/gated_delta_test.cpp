// The gated delta rule's two CPU forms (engine/cpu/gated_delta.h) on fresh random data: the
// chunked prefill form equals the recurrent decode form (outputs and final state, any chunk size,
// lengths around the chunk), a state handed from one form to the other continues the same
// sequence, and one step from a zero state has its closed form.
#include "engine/cpu/gated_delta.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace dq::cpu {
namespace {

struct Inputs {
  GatedDeltaShape s;
  int64_t t = 0;
  std::vector<float> q, k, v, g, beta, state;
};

// L2-normalized q and k (as the layer feeds them), log decays in [-1.5, 0), beta in (0, 1).
Inputs Random(GatedDeltaShape s, int64_t t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Inputs in{s, t};
  auto unit_rows = [&](int64_t rows, int dim) {
    std::vector<float> x(rows * dim);
    for (int64_t r = 0; r < rows; ++r) {
      float norm = 0.0f;
      for (int d = 0; d < dim; ++d) norm += (x[r * dim + d] = n(rng)) * x[r * dim + d];
      for (int d = 0; d < dim; ++d) x[r * dim + d] /= std::sqrt(norm);
    }
    return x;
  };
  in.q = unit_rows(t * s.heads, s.dk);
  in.k = unit_rows(t * s.heads, s.dk);
  in.v.resize(t * s.heads * s.dv);
  for (float& x : in.v) x = n(rng);
  for (int64_t i = 0; i < t * s.heads; ++i) {
    in.g.push_back(-1.5f * u(rng) - 1e-3f);
    in.beta.push_back(0.02f + 0.96f * u(rng));
  }
  in.state.resize(int64_t{s.heads} * s.dk * s.dv);
  for (float& x : in.state) x = 0.3f * n(rng);
  return in;
}

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = a.size() == b.size() ? 0.0 : 1e30;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

struct Result {
  std::vector<float> out, state;
};
Result Recurrent(const Inputs& in) {
  Result r{std::vector<float>(in.t * in.s.heads * in.s.dv), in.state};
  GatedDeltaRecurrent(in.s, in.t, in.q.data(), in.k.data(), in.v.data(), in.g.data(),
                      in.beta.data(), r.state.data(), r.out.data());
  return r;
}
Result Chunked(const Inputs& in, int chunk) {
  Result r{std::vector<float>(in.t * in.s.heads * in.s.dv), in.state};
  GatedDeltaChunked(in.s, in.t, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                    r.state.data(), r.out.data(), chunk);
  return r;
}

TEST(GatedDelta, ChunkedEqualsRecurrent) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (int64_t t : {1, 2, 63, 64, 65, 150}) {
    for (int chunk : {64, 16}) {
      SCOPED_TRACE(::testing::Message() << t << " tokens, chunk " << chunk);
      const Inputs in = Random({3, 16, 8}, t, seed + t);
      const Result a = Recurrent(in), b = Chunked(in, chunk);
      EXPECT_LT(MaxDiff(a.out, b.out), 2e-4);
      EXPECT_LT(MaxDiff(a.state, b.state), 2e-4);
    }
  }
  // Qwen3.5's head dims (d_k = d_v = 128), one head.
  const Inputs big = Random({1, 128, 128}, 70, seed);
  EXPECT_LT(MaxDiff(Recurrent(big).out, Chunked(big, 64).out), 2e-4);
}

// Prefill the first tokens in chunks, then decode the rest step by step from the handed-over
// state: the same outputs as the recurrence over the whole sequence.
TEST(GatedDelta, ChunkedPrefillThenRecurrentDecodeContinueTheSequence) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const GatedDeltaShape s{2, 16, 16};
  const int64_t t = 100, prefix = 70;
  const Inputs in = Random(s, t, seed);
  const Result whole = Recurrent(in);
  std::vector<float> state = in.state, out(t * s.heads * s.dv);
  GatedDeltaChunked(s, prefix, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                    state.data(), out.data());
  const int64_t qk = prefix * s.heads * s.dk, vo = prefix * s.heads * s.dv, gb = prefix * s.heads;
  GatedDeltaRecurrent(s, t - prefix, in.q.data() + qk, in.k.data() + qk, in.v.data() + vo,
                      in.g.data() + gb, in.beta.data() + gb, state.data(), out.data() + vo);
  EXPECT_LT(MaxDiff(out, whole.out), 2e-4);
  EXPECT_LT(MaxDiff(state, whole.state), 2e-4);
}

// From a zero state with no decay (g = 0), one token writes S = beta k v^T and reads
// o = beta (k . q / sqrt(dk)) v.
TEST(GatedDelta, OneStepFromZeroHasItsClosedForm) {
  Inputs in = Random({1, 4, 3}, 1, 7);
  in.g = {0.0f};
  in.beta = {0.5f};
  std::fill(in.state.begin(), in.state.end(), 0.0f);
  const Result r = Recurrent(in), c = Chunked(in, 64);
  float kq = 0.0f;
  for (int d = 0; d < 4; ++d) kq += in.k[d] * in.q[d];
  for (int e = 0; e < 3; ++e) {
    EXPECT_NEAR(r.out[e], 0.5f * kq / 2.0f * in.v[e], 1e-6);
    EXPECT_NEAR(c.out[e], r.out[e], 1e-6);
    for (int d = 0; d < 4; ++d) EXPECT_NEAR(r.state[d * 3 + e], 0.5f * in.k[d] * in.v[e], 1e-6);
  }
}

// The conv over a whole prompt equals the conv over its first part and then token by token with
// the carried state, and equals the direct sum with zero history.
TEST(GatedDelta, CausalConvPrefillAndDecodeAgreeWithTheDirectSum) {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> n(0.0f, 1.0f);
  const int channels = 5, kernel = 4;
  const int64_t t = 11;
  std::vector<float> x(t * channels), w(channels * kernel);
  for (float& v : x) v = n(rng);
  for (float& v : w) v = n(rng);
  std::vector<float> whole(t * channels), state(channels * (kernel - 1), 0.0f);
  CausalConv1dSilu(channels, kernel, t, x.data(), w.data(), state.data(), whole.data());
  for (int64_t i = 0; i < t; ++i) {
    for (int c = 0; c < channels; ++c) {
      double acc = 0;
      for (int j = 0; j < kernel; ++j) {
        const int64_t src = i - (kernel - 1) + j;
        if (src >= 0) acc += double{w[c * kernel + j]} * x[src * channels + c];
      }
      EXPECT_NEAR(whole[i * channels + c], acc / (1 + std::exp(-acc)), 1e-5) << i << " " << c;
    }
  }
  std::vector<float> split(t * channels), st(channels * (kernel - 1), 0.0f);
  CausalConv1dSilu(channels, kernel, 6, x.data(), w.data(), st.data(), split.data());
  for (int64_t i = 6; i < t; ++i) {
    CausalConv1dSilu(channels, kernel, 1, x.data() + i * channels, w.data(), st.data(),
                     split.data() + i * channels);
  }
  EXPECT_EQ(split, whole);
  EXPECT_EQ(st, state);
}

TEST(GatedDelta, L2NormAndGatedRmsNormHaveTheirFormulas) {
  std::vector<float> x = {3.0f, 4.0f, 0.0f, 0.0f};
  L2NormRows(x.data(), 2, 2);
  EXPECT_NEAR(x[0], 0.6f, 1e-6);
  EXPECT_NEAR(x[1], 0.8f, 1e-6);
  EXPECT_EQ(x[2], 0.0f);  // the eps keeps a zero row finite
  const float in[2] = {1.0f, -1.0f}, z[2] = {0.0f, 2.0f}, weight[2] = {2.0f, 0.5f};
  float out[2];
  GatedRmsNorm(in, z, weight, 1, 2, 0.0f, out);
  EXPECT_NEAR(out[0], 0.0f, 1e-7);  // silu(0) = 0
  EXPECT_NEAR(out[1], 0.5f * -1.0f * (2.0f / (1.0f + std::exp(-2.0f))), 1e-6);
}

}  // namespace
}  // namespace dq::cpu
