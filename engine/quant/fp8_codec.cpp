// Scheme "fp8": E4M3 weights with one FP32 scale per output channel (compressed-tensors'
// FP8_DYNAMIC preset, stored in its "float-quantized" format), optionally with per-token dynamic
// E4M3 activations (w8a8).
//
// Components of an [out, in] matrix:
//   "weight"        F8_E4M3 [out, in]  q
//   "weight_scale"  F32 [out, 1]       s_r (read: also BF16/F16, and [out])
// Numerics, matching compressed-tensors' calculate_qparams/_quantize/_dequantize op for op in fp32:
//   s_r = row_amax / 448, where row_amax is the largest finite |w| in the row. An all-zero row
//         gives s_r = 0, which compressed-tensors replaces by fp32's epsilon (2^-23) to keep the
//         division finite; we do the same, so the stored bytes agree and the row decodes to 0.
//   q   = E4M3(w / s_r), round to nearest even, saturating at +-448.
//   w'  = E4M3ToFloat(q) * s_r.
// Non-finite weights (our definition; compressed-tensors leaves them undefined): +-inf saturates
// to +-448 (w' = +-row_amax) and NaN is stored as 0, since a checkpoint must hold numbers.
// Activations (w8a8): per token, s = amax(|x|) / 448 (finite values), x <- E4M3(x / s) * s;
// NaN stays NaN so that a broken activation is not hidden.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_join.h"
#include "engine/quant/fp8_e4m3.h"
#include "engine/quant/weight_codec.h"

namespace dq {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

float FiniteAmax(const float* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (std::isfinite(a) && a > amax) amax = a;
  }
  return amax;
}

// The per-channel (or per-token) scale; never 0, so that dividing by it is always finite.
float ScaleFromAmax(float amax) {
  const float s = amax / kE4M3Max;
  return s == 0.0f ? FLT_EPSILON : s;
}

float ReadScale(const ComponentView& c, int64_t r) {
  switch (c.dtype) {
    case DType::kBF16:
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, c.data + 2 * r, sizeof h);
      return c.dtype == DType::kBF16 ? BF16ToF32(h) : F16ToF32(h);
    }
    default: {
      float f;
      std::memcpy(&f, c.data + 4 * r, sizeof f);
      return f;
    }
  }
}

absl::Status CheckWeight(const QuantizedView& q, const std::string& name) {
  auto it = q.parts.find("weight");
  if (it == q.parts.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' (fp8) has no component 'weight'; an fp8 checkpoint needs '", name,
        ".weight' (F8_E4M3 [out, in]) and '", name, ".weight_scale'"));
  }
  const ComponentView& c = it->second;
  const std::vector<int64_t> want = {q.out_features, q.in_features};
  if (c.dtype != DType::kF8E4M3 || c.shape != want || c.nbytes != want[0] * want[1] ||
      c.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' (fp8) component 'weight' is ", DTypeName(c.dtype), " ",
        ShapeString(c.shape), " with ", c.nbytes, " bytes; expected F8_E4M3 ", ShapeString(want),
        " (re-export the checkpoint with compressed-tensors' float-quantized format)"));
  }
  return absl::OkStatus();
}

absl::Status CheckScale(const QuantizedView& q, const std::string& name) {
  auto it = q.parts.find("weight_scale");
  if (it == q.parts.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' (fp8) has no component 'weight_scale'; expected one scale per ",
        "output channel, F32 [", q.out_features, ", 1] (per-tensor fp8 is not supported)"));
  }
  const ComponentView& c = it->second;
  const int64_t out = q.out_features;
  const bool dtype_ok = c.dtype == DType::kF32 || c.dtype == DType::kBF16 || c.dtype == DType::kF16;
  const bool shape_ok =
      c.shape == std::vector<int64_t>{out, 1} || c.shape == std::vector<int64_t>{out};
  if (!dtype_ok || !shape_ok || c.data == nullptr || c.nbytes != out * DTypeBlockBytes(c.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' (fp8) component 'weight_scale' is ", DTypeName(c.dtype),
                     " ", ShapeString(c.shape), " with ", c.nbytes,
                     " bytes; expected F32, BF16 or F16 [", out, ", 1] or [", out,
                     "] (one scale per output channel; per-tensor or block fp8 scales are "
                     "not supported)"));
  }
  return absl::OkStatus();
}

class Fp8WeightCodec final : public WeightCodec {
 public:
  std::string_view scheme() const override { return "fp8"; }

  double BitsPerWeight(int64_t out, int64_t in, int group_size) const override {
    return 8.0 + 32.0 / static_cast<double>(in);
  }

  absl::StatusOr<QuantizedTensors> Quantize(const float* w, int64_t out, int64_t in,
                                            const QuantizeOptions& options) const override {
    if (out <= 0 || in <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("fp8: cannot quantize a [", out, ", ", in,
                                                     "] matrix; both dimensions must be > 0"));
    }
    std::vector<uint8_t> q(static_cast<size_t>(out * in));
    std::vector<uint8_t> scales(static_cast<size_t>(out) * sizeof(float));
    for (int64_t r = 0; r < out; ++r) {
      const float* row = w + r * in;
      const float s = ScaleFromAmax(FiniteAmax(row, in));
      std::memcpy(scales.data() + r * sizeof(float), &s, sizeof s);
      for (int64_t i = 0; i < in; ++i) {
        q[r * in + i] = std::isnan(row[i]) ? 0 : FloatToE4M3(row[i] / s);
      }
    }
    QuantizedTensors t;
    t.view.scheme = "fp8";
    t.view.out_features = out;
    t.view.in_features = in;
    t.view.group_size = 0;
    t.Add("weight", DType::kF8E4M3, {out, in}, std::move(q));
    t.Add("weight_scale", DType::kF32, {out, 1}, std::move(scales));
    return t;
  }

  absl::Status Validate(const QuantizedView& q, const std::string& tensor_name) const override {
    if (q.out_features <= 0 || q.in_features <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor_name, "' (fp8) has shape [",
                                                     q.out_features, ", ", q.in_features,
                                                     "]; both dimensions must be > 0"));
    }
    DQ_RETURN_IF_ERROR(CheckWeight(q, tensor_name));
    return CheckScale(q, tensor_name);
  }

  void DequantizeRow(const QuantizedView& q, int64_t r, float* dst) const override {
    const int64_t in = q.in_features;
    const uint8_t* codes = q.parts.at("weight").data + r * in;
    const float s = ReadScale(q.parts.at("weight_scale"), r);
    for (int64_t i = 0; i < in; ++i) dst[i] = E4M3ToFloat(codes[i]) * s;
  }

  bool Supports(ComputeMode mode) const override {
    return mode == ComputeMode::kWeightOnly || mode == ComputeMode::kW8A8;
  }

  void QuantizeActivations(ComputeMode mode, float /*act_global_scale*/, float* x,
                           int64_t n) const override {
    if (mode != ComputeMode::kW8A8) return;
    const float s = ScaleFromAmax(FiniteAmax(x, n));
    for (int64_t i = 0; i < n; ++i) x[i] = E4M3ToFloat(FloatToE4M3(x[i] / s)) * s;
  }
};

}  // namespace

const WeightCodec* Fp8Codec() {
  static const Fp8WeightCodec codec;
  return &codec;
}

}  // namespace dq
