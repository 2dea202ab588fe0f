// ArgmaxForward and SampleForward against the CPU Sampler (engine/sampler/sampler.h).
#include "engine/cuda/sampling.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "engine/cuda/device_buffer.h"
#include "engine/sampler/sampler.h"
#include "tests/gpu/gpu_test_util.h"

namespace dq::cuda {
namespace {

using gpu_test::FreshSeed;

// The CPU Sampler's first uniform for `seed` (SplitMix64 at counter 1, 53 bits).
double FirstUniform(uint64_t seed) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

int32_t CpuSample(std::vector<float> row, const SamplingParams& p) {
  Sampler s(p);
  return s.Sample(row);
}

// The kept set of the CPU's sorted path, by brute force (full sort by (value desc, id asc)),
// and the draw in id order over it: what SampleForward promises.
struct Expected {
  std::vector<char> kept;
  int32_t token;
};
Expected SortedReference(std::vector<float> l, const SamplingParams& p, double u) {
  const int n = static_cast<int>(l.size());
  const float inv_t = 1.0f / p.temperature;
  if (p.temperature != 1.0f) {
    for (float& v : l) v *= inv_t;
  }
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) {
    if (!std::isnan(l[i])) ids.push_back(i);
  }
  auto by_desc = [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  std::sort(ids.begin(), ids.end(), by_desc);
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < ids.size()) ids.resize(p.top_k);
  const float m = l[ids[0]];
  std::vector<std::pair<float, int32_t>> c;
  for (int32_t id : ids) c.push_back({std::exp(l[id] - m), id});
  std::sort(c.begin(), c.end(), [](auto a, auto b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  size_t keep = c.size();
  if (p.top_p < 1.0f) {
    double total = 0.0;
    for (auto& e : c) total += e.first;
    const double target = static_cast<double>(p.top_p) * total;
    double before = 0.0;
    keep = 0;
    while (keep < c.size() && before < target) before += c[keep++].first;
    keep = std::max<size_t>(keep, 1);
  }
  Expected e{std::vector<char>(n, 0), 0};
  std::vector<float> prob(n, 0.0f);
  for (size_t i = 0; i < keep; ++i) {
    if (c[i].first >= p.min_p) e.kept[c[i].second] = 1, prob[c[i].second] = c[i].first;
  }
  double sum = 0.0;
  for (float v : prob) sum += v;
  double acc = 0.0;
  for (int i = 0; i < n; ++i) {
    if (prob[i] <= 0.0f) continue;
    acc += prob[i];
    e.token = i;
    if (acc > u * sum) break;
  }
  return e;
}

struct Case {
  float temperature;
  int top_k;
  float top_p;
  float min_p;
};

void CheckSampling(int vocab, bool bf16, const Case& c) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " vocab " << vocab << " bf16 " << bf16
                                  << " T " << c.temperature << " k " << c.top_k << " p " << c.top_p
                                  << " min_p " << c.min_p);
  const int rows = 48;
  std::vector<float> logits = gpu_test::RandomFloats(int64_t{rows} * vocab, seed, 3.0f);
  if (bf16) logits = gpu_test::RoundBf16(logits);  // many exact ties
  std::vector<float> temp(rows, c.temperature), top_p(rows, c.top_p), min_p(rows, c.min_p);
  std::vector<int32_t> top_k(rows, c.top_k);
  std::vector<double> u(rows);
  std::vector<SamplingParams> params(rows);
  for (int r = 0; r < rows; ++r) {
    params[r].temperature = c.temperature, params[r].top_k = c.top_k;
    params[r].top_p = c.top_p, params[r].min_p = c.min_p, params[r].seed = seed * 131 + r;
    u[r] = FirstUniform(*params[r].seed);
  }
  DeviceBuffer d_l =
      bf16 ? DeviceBuffer::From(gpu_test::ToBf16(logits)) : DeviceBuffer::From(logits);
  DeviceBuffer d_t = DeviceBuffer::From(temp), d_k = DeviceBuffer::From(top_k);
  DeviceBuffer d_p = DeviceBuffer::From(top_p), d_m = DeviceBuffer::From(min_p);
  DeviceBuffer d_u = DeviceBuffer::From(u), d_out(rows * sizeof(int32_t));
  SamplingArgs a;
  a.logits.bf16 = bf16 ? d_l.get<__nv_bfloat16>() : nullptr;
  a.logits.f32 = bf16 ? nullptr : d_l.get<float>();
  a.logits.rows = rows;
  a.logits.vocab = vocab;
  a.temperature = d_t.get<float>(), a.top_k = d_k.get<int32_t>(), a.top_p = d_p.get<float>();
  a.min_p = d_m.get<float>(), a.uniform = d_u.get<double>(), a.out_ids = d_out.get<int32_t>();
  SampleForward(a, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int32_t> got = d_out.ToHost<int32_t>();
  const bool sorted = (c.top_k > 0 && c.top_k < vocab) || c.top_p < 1.0f;
  int distinct = 0;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row(logits.begin() + int64_t{r} * vocab,
                           logits.begin() + int64_t{r + 1} * vocab);
    const int32_t cpu = CpuSample(row, params[r]);
    if (!sorted || c.temperature < 1e-5f) {
      EXPECT_EQ(got[r], cpu) << "row " << r << " u " << u[r];
    } else {
      const Expected e = SortedReference(row, params[r], u[r]);
      EXPECT_TRUE(e.kept[cpu]) << "the CPU's token is outside the brute-force kept set, row " << r;
      EXPECT_EQ(got[r], e.token) << "row " << r << " u " << u[r];
    }
    distinct += r == 0 || got[r] != got[r - 1];
  }
  std::printf("sample vocab=%d bf16=%d T=%.2f k=%d p=%.2f min_p=%.2f: %d rows ok (%d distinct)\n",
              vocab, bf16, c.temperature, c.top_k, c.top_p, c.min_p, rows, distinct);
}

TEST(GpuSampling, ArgmaxMatchesCpuGreedy) {
  DQ_REQUIRE_GPU();
  for (int vocab : {151936, 49152, 1000}) {
    for (bool bf16 : {false, true}) {
      const uint64_t seed = FreshSeed();
      SCOPED_TRACE(testing::Message() << "seed " << seed << " vocab " << vocab);
      const int rows = 6;
      std::vector<float> l = gpu_test::RoundBf16(gpu_test::RandomFloats(rows * vocab, seed));
      l[1 * vocab + 17] = 50.0f, l[1 * vocab + vocab - 3] = 50.0f;   // tie: lowest id
      for (int i = 0; i < vocab; ++i) l[2 * vocab + i] = -INFINITY;  // nothing beats -inf: 0
      l[3 * vocab + 5] = NAN, l[3 * vocab + 9] = 60.0f;              // NaN skipped
      l[4 * vocab + vocab - 1] = INFINITY;
      DeviceBuffer d = bf16 ? DeviceBuffer::From(gpu_test::ToBf16(l)) : DeviceBuffer::From(l);
      DeviceBuffer d_out(rows * sizeof(int32_t));
      LogitsView v;
      v.f32 = bf16 ? nullptr : d.get<float>();
      v.bf16 = bf16 ? d.get<__nv_bfloat16>() : nullptr;
      v.rows = rows, v.vocab = vocab;
      ArgmaxForward(v, d_out.get<int32_t>(), nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<int32_t> got = d_out.ToHost<int32_t>();
      SamplingParams greedy;
      greedy.temperature = 0.0f;
      for (int r = 0; r < rows; ++r) {
        std::vector<float> row(l.begin() + r * vocab, l.begin() + (r + 1) * vocab);
        EXPECT_EQ(got[r], CpuSample(row, greedy)) << "row " << r;
      }
    }
  }
}

TEST(GpuSampling, UnsortedPathMatchesCpuTokenForToken) {
  DQ_REQUIRE_GPU();
  for (bool bf16 : {false, true}) {
    CheckSampling(151936, bf16, {1.0f, 0, 1.0f, 0.0f});
    CheckSampling(151936, bf16, {0.7f, 0, 1.0f, 0.05f});
    CheckSampling(49152, bf16, {1.3f, -1, 1.0f, 0.0f});
    CheckSampling(49152, bf16, {0.0f, 40, 0.9f, 0.0f});  // greedy wins over top-k/top-p
  }
}

TEST(GpuSampling, TopKTopPMinPKeepTheCpuSetAndDrawInIdOrder) {
  DQ_REQUIRE_GPU();
  for (bool bf16 : {false, true}) {
    CheckSampling(151936, bf16, {1.0f, 50, 1.0f, 0.0f});
    CheckSampling(151936, bf16, {0.8f, 0, 0.9f, 0.0f});
    CheckSampling(151936, bf16, {1.0f, 40, 0.8f, 0.02f});
    CheckSampling(49152, bf16, {1.5f, 1000, 0.95f, 0.0f});
    CheckSampling(49152, bf16, {0.6f, 1, 1.0f, 0.0f});
    CheckSampling(1000, bf16, {2.0f, 0, 0.3f, 0.1f});
  }
}

}  // namespace
}  // namespace dq::cuda
