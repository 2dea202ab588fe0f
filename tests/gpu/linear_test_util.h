// Helpers for the linear-layer GPU tests: CPU-side LinearWeights built the way
// engine/model/weight_binder.cpp builds them, the CPU reference (cpu::MatMul) with its
// |x|·|w| companion for error bounds, and the bound itself.
#pragma once

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/thread_pool.h"
#include "engine/cpu/cpu_ops.h"
#include "engine/model/linear_weight.h"
#include "engine/quant/weight_codec.h"
#include "tests/gpu/gpu_test_util.h"

namespace dq::gpu_test {

inline ThreadPool& Pool() {
  static ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  return pool;
}

// A plain bf16 [out, in] matrix holding `w` rounded to bf16.
inline LinearWeight Bf16Weight(const std::vector<float>& w, int64_t out, int64_t in) {
  LinearWeight lw;
  lw.dtype = DType::kBF16;
  lw.out_features = out;
  lw.in_features = in;
  lw.row_bytes = in * 2;
  lw.owned.resize(static_cast<size_t>(out * in * 2));
  for (int64_t i = 0; i < out * in; ++i) {
    const uint16_t b = ToBf16Bits(w[i]);
    std::memcpy(lw.owned.data() + 2 * i, &b, 2);
  }
  lw.data = lw.owned.data();
  return lw;
}

// A plain f32 matrix (for the |x|·|w| bound).
inline LinearWeight F32Weight(const std::vector<float>& w, int64_t out, int64_t in) {
  LinearWeight lw;
  lw.dtype = DType::kF32;
  lw.out_features = out;
  lw.in_features = in;
  lw.row_bytes = in * 4;
  lw.owned.resize(static_cast<size_t>(out * in * 4));
  std::memcpy(lw.owned.data(), w.data(), lw.owned.size());
  lw.data = lw.owned.data();
  return lw;
}

// `w` quantized with the CPU codec `scheme` and bound for `mode`, as the weight binder does.
inline LinearWeight CodecWeight(const std::string& scheme, ComputeMode mode,
                                const std::vector<float>& w, int64_t out, int64_t in,
                                float act_global_scale = 0.0f, int group_size = 0) {
  const WeightCodec* codec = FindWeightCodec(scheme).value();
  QuantizeOptions opt;
  opt.group_size = group_size;
  auto q = std::make_shared<QuantizedTensors>(codec->Quantize(w.data(), out, in, opt).value());
  LinearWeight lw;
  lw.codec = codec;
  lw.owned_quantized = q;
  lw.quantized = q->view;
  lw.mode = mode;
  lw.act_global_scale = act_global_scale;
  lw.out_features = out;
  lw.in_features = in;
  return lw;
}

// The CPU reference y = MatMul(w, x) and, beside it, |x'|·|w'| over the operands the CPU
// actually multiplies (activations after QuantizeActivations, weights after dequantization).
struct Reference {
  std::vector<float> y;
  std::vector<float> abs_y;
};

inline Reference CpuReference(const LinearWeight& w, const std::vector<float>& x, int64_t m) {
  const int64_t out = w.out_features, in = w.in_features;
  Reference r;
  r.y.resize(static_cast<size_t>(m * out));
  cpu::MatMul(w, x.data(), m, r.y.data(), Pool());
  std::vector<float> wabs(static_cast<size_t>(out * in));
  Pool().ParallelFor(out, 16, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      float* dst = wabs.data() + row * in;
      if (w.codec != nullptr) {
        w.codec->DequantizeRow(w.quantized, row, dst);
      } else {
        for (int64_t i = 0; i < in; ++i) {
          uint16_t h;
          std::memcpy(&h, w.row(row) + 2 * i, 2);
          dst[i] = FromBf16Bits(h);
        }
      }
      for (int64_t i = 0; i < in; ++i) dst[i] = std::fabs(dst[i]);
    }
  });
  std::vector<float> xabs = x;
  for (int64_t t = 0; t < m; ++t) {
    if (w.codec != nullptr) {
      w.codec->QuantizeActivations(w.mode, w.act_global_scale, &xabs[t * in], in);
    }
  }
  for (float& v : xabs) v = std::fabs(v);
  r.abs_y.resize(r.y.size());
  cpu::MatMul(F32Weight(wabs, out, in), xabs.data(), m, r.abs_y.data(), Pool());
  return r;
}

// Bound per output: bf16 rounding of the result (2^-8 |ref|, covering half an ulp of the value
// the device rounded) plus the difference of two fp32 summation orders, taken as
// sum_rel * sum_i |x_i w_i| (~100x above what fp32 accumulation of these lengths shows, and
// ~10x below a missed activation quantization).
struct ErrorReport {
  double worst_ratio = 0;  // max |got - ref| / bound (passes when <= 1)
  double max_abs = 0;      // max |got - ref|
  double rel = 0;          // max |got - ref| / max |ref|
  int64_t worst_index = -1;
};

inline ErrorReport Compare(const std::vector<float>& got, const Reference& ref, double out_rel,
                           double sum_rel) {
  ErrorReport e;
  double ref_max = 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - ref.y[i]);
    const double bound = out_rel * std::fabs(ref.y[i]) + sum_rel * ref.abs_y[i] + 1e-30;
    const double ratio = std::isnan(d) ? 1e30 : d / bound;
    if (ratio > e.worst_ratio) {
      e.worst_ratio = ratio;
      e.worst_index = static_cast<int64_t>(i);
    }
    e.max_abs = std::max(e.max_abs, d);
    ref_max = std::max(ref_max, std::fabs(static_cast<double>(ref.y[i])));
  }
  e.rel = e.max_abs / ref_max;
  return e;
}

// Fast uniform-ish random floats in [-scale, scale) (weights for timing runs).
inline std::vector<float> FastRandom(size_t n, uint64_t seed, float scale) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    f = (static_cast<float>(s >> 40) * 0x1p-24f * 2.0f - 1.0f) * scale;
  }
  return v;
}

}  // namespace dq::gpu_test
