// Host-side weights for the weight-only tests and benchmark: every format the device supports,
// built as engine/model/weight_binder.cpp builds a LinearWeight (codec + components, or GGUF
// rows), from fresh random weights or (for timing) zeros.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "engine/model/linear_weight.h"
#include "engine/quant/weight_codec.h"
#include "tests/gpu/gpu_test_util.h"

namespace dq::cuda::wo_test {

struct FormatSpec {
  std::string name;    // test-name friendly
  std::string scheme;  // codec scheme, or "" for a GGUF / bf16 dtype
  int group = 0;
  DType dtype = DType::kF32;
  double bits_per_weight = 0;  // stored bytes * 8 / weights (for the roofline)
};

inline std::vector<FormatSpec> AllFormats() {
  return {
      {"int4_g128", "int4", 128, DType::kF32, 4 + 24.0 / 128},
      {"int4_g64", "int4", 64, DType::kF32, 4 + 24.0 / 64},
      {"int4_g32", "int4", 32, DType::kF32, 4 + 24.0 / 32},
      {"int3_g128", "int3", 128, DType::kF32, 3 + 24.0 / 128},
      {"int2_g64", "int2", 64, DType::kF32, 2 + 24.0 / 64},
      {"int2_g32", "int2", 32, DType::kF32, 2 + 24.0 / 32},
      {"int8_g128", "int8", 128, DType::kF32, 8 + 24.0 / 128},
      {"nvfp4", "nvfp4", 0, DType::kF32, 4.5},
      {"lut3", "lut3", 0, DType::kF32, 3.5},
      {"lut2", "lut2", 0, DType::kF32, 2.5},
      {"Q4_0", "", 0, DType::kQ4_0, 4.5},
      {"Q4_1", "", 0, DType::kQ4_1, 5.0},
      {"Q8_0", "", 0, DType::kQ8_0, 8.5},
      {"Q4_K", "", 0, DType::kQ4_K, 4.5},
      {"Q6_K", "", 0, DType::kQ6_K, 6.5625},
      {"bf16", "", 0, DType::kBF16, 16.0},
  };
}

// A LinearWeight and the storage it points into.
struct HostWeight {
  LinearWeight w;
  std::vector<uint8_t> rows;  // GGUF / bf16 rows
};

inline void PutF16(uint8_t* p, float v) {
  const uint16_t h = F32ToF16(v);
  std::memcpy(p, &h, 2);
}

// Random GGUF blocks: random codes and scale bytes, with the fp16 d / dmin / m fields set to
// finite values of a realistic size.
inline std::vector<uint8_t> RandomGgufRows(DType t, int64_t out, int64_t in, uint64_t seed) {
  std::vector<uint8_t> rows(out * DTypeRowBytes(t, in));
  std::mt19937_64 rng(seed);
  for (auto& b : rows) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  const int64_t bb = DTypeBlockBytes(t);
  for (int64_t off = 0; off < static_cast<int64_t>(rows.size()); off += bb) {
    uint8_t* blk = rows.data() + off;
    switch (t) {
      case DType::kQ4_0:
      case DType::kQ8_0:
        PutF16(blk, scale(rng));
        break;
      case DType::kQ4_1:
      case DType::kQ4_K:
        PutF16(blk, scale(rng));
        PutF16(blk + 2, (t == DType::kQ4_1 ? -8.0f : 1.0f) * scale(rng));
        break;
      case DType::kQ6_K:
        PutF16(blk + 208, scale(rng));
        break;
      default:
        break;
    }
  }
  return rows;
}

// `random`: quantized from fresh normal weights (codecs) or random blocks (GGUF); otherwise
// all-zero components of the right shapes (for timing, where values do not matter).
inline HostWeight MakeWeight(const FormatSpec& f, int64_t out, int64_t in, uint64_t seed,
                             bool random) {
  HostWeight hw;
  LinearWeight& w = hw.w;
  w.out_features = out;
  w.in_features = in;
  if (f.scheme.empty()) {
    w.dtype = f.dtype;
    w.row_bytes = DTypeRowBytes(f.dtype, in);
    if (!random) {
      hw.rows.assign(out * w.row_bytes, 0);
    } else if (f.dtype == DType::kBF16) {
      const auto v = gpu_test::ToBf16(gpu_test::RandomFloats(out * in, seed, 0.05f));
      hw.rows.resize(v.size() * 2);
      std::memcpy(hw.rows.data(), v.data(), hw.rows.size());
    } else {
      hw.rows = RandomGgufRows(f.dtype, out, in, seed);
    }
    w.data = hw.rows.data();
    return hw;
  }
  w.codec = FindWeightCodec(f.scheme).value();
  QuantizeOptions opt;
  opt.group_size = f.group;
  std::vector<float> src =
      random ? gpu_test::RandomFloats(out * in, seed, 0.05f) : std::vector<float>(out * in, 0.0f);
  if (random) {  // a few outliers, so that scales vary
    std::mt19937_64 rng(seed ^ 0x5bd1e995);
    for (int i = 0; i < out; ++i) src[rng() % src.size()] *= 20.0f;
  }
  auto q = w.codec->Quantize(src.data(), out, in, opt);
  w.owned_quantized = std::make_shared<QuantizedTensors>(std::move(q).value());
  w.quantized = w.owned_quantized->view;
  return hw;
}

// All-zero components of the right shapes, built directly (no quantization: fast at the
// Qwen3-4B sizes); for timing only, where values do not matter.
inline HostWeight MakeZeroWeight(const FormatSpec& f, int64_t out, int64_t in) {
  if (f.scheme.empty()) return MakeWeight(f, out, in, 0, false);
  HostWeight hw;
  LinearWeight& w = hw.w;
  w.out_features = out;
  w.in_features = in;
  w.codec = FindWeightCodec(f.scheme).value();
  auto t = std::make_shared<QuantizedTensors>();
  t->view.scheme = f.scheme;
  t->view.out_features = out;
  t->view.in_features = in;
  t->view.group_size = f.group;
  const int bits = f.scheme.back() - '0';
  if (f.scheme.rfind("int", 0) == 0) {
    const int64_t ng = in / f.group;
    t->Add("qweight", DType::kU8, {out, in * bits / 8}, std::vector<uint8_t>(out * in * bits / 8));
    t->Add("scales", DType::kF16, {out, ng}, std::vector<uint8_t>(out * ng * 2));
    t->Add("zeros", DType::kU8, {out, ng}, std::vector<uint8_t>(out * ng));
  } else {
    const int pb = f.scheme == "nvfp4" ? 4 : bits;
    std::vector<uint8_t> g(4);
    const float one = 1.0f;
    std::memcpy(g.data(), &one, 4);
    t->Add("weight_packed", DType::kU8, {out, in * pb / 8},
           std::vector<uint8_t>(out * in * pb / 8));
    t->Add("weight_scale", DType::kF8E4M3, {out, in / 16}, std::vector<uint8_t>(out * in / 16));
    t->Add("weight_global_scale", DType::kF32, {1}, std::move(g));
  }
  w.owned_quantized = t;
  w.quantized = t->view;
  return hw;
}

inline HostWeight MakeRandomWeight(const FormatSpec& f, int64_t out, int64_t in, uint64_t seed) {
  return MakeWeight(f, out, in, seed, true);
}

}  // namespace dq::cuda::wo_test
