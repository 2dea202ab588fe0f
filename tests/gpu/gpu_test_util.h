// Shared helpers for the GPU op tests: fresh random data, bf16 on the host, error measures.
#pragma once

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace dq::gpu_test {

// A fresh seed per call (logged by the caller on failure), so every run sees new data.
inline uint64_t FreshSeed() { return std::random_device{}(); }

inline std::vector<float> RandomFloats(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Round-to-nearest-even, as the device's __float2bfloat16 does.
inline uint16_t ToBf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return 0x7fc0;  // NaN
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
inline float FromBf16Bits(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline std::vector<__nv_bfloat16> ToBf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t b = ToBf16Bits(v[i]);
    std::memcpy(&out[i], &b, 2);
  }
  return out;
}
inline std::vector<float> FromBf16(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t b;
    std::memcpy(&b, &v[i], 2);
    out[i] = FromBf16Bits(b);
  }
  return out;
}
// Values rounded through bf16 (the CPU reference then sees exactly the device's inputs).
inline std::vector<float> RoundBf16(std::vector<float> v) {
  for (float& x : v) x = FromBf16Bits(ToBf16Bits(x));
  return v;
}

// max |a - b| / max(max |b|, tiny): error relative to the reference's scale.
inline double MaxRelError(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(got[i]) - ref[i]));
    den = std::max(den, std::fabs(static_cast<double>(ref[i])));
  }
  return num / den;
}

// Skips the test (instead of failing on a CUDA error) on a machine without a GPU.
#define DQ_REQUIRE_GPU()                                                   \
  do {                                                                     \
    int dq_devices = 0;                                                    \
    if (cudaGetDeviceCount(&dq_devices) != cudaSuccess || dq_devices == 0) \
      GTEST_SKIP() << "no CUDA device";                                    \
  } while (0)

}  // namespace dq::gpu_test
