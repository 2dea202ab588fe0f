// Scheme "nvfp4": E2M1 weights in blocks of 16 along `in`, one E4M3 scale per block and one FP32
// global scale per tensor (the paper's NVFP4), stored as compressed-tensors'
// "nvfp4-pack-quantized" format so that llm-compressor checkpoints (and ModelOpt ones after
// compressed-tensors' converter) load unchanged.
//
// Components of an [out, in] matrix (in % 16 == 0):
//   "weight_packed"        U8      [out, in/2]   two E2M1 nibbles per byte: element 2j in the
//                                                LOW nibble, 2j+1 in the HIGH nibble; each
//                                                nibble is sign (bit 3) + magnitude code 0..7
//                                                (compressed-tensors pack_fp4_to_uint8).
//   "weight_scale"         F8_E4M3 [out, in/16]  block scale s_b (always >= 0).
//   "weight_global_scale"  F32     [1]           G = 6 * 448 / amax: the RECIPROCAL of the
//                                                paper's global scale amax / (6 * 448)
//                                                (compressed-tensors generate_gparam; ModelOpt's
//                                                weight_scale_2 is the paper's value, and the
//                                                converter stores 1 / weight_scale_2 here).
// Numerics, each step in fp32 in compressed-tensors' order (calculate_qparams, _quantize,
// _dequantize), so that our bytes equal theirs; the paper's formulas are the same up to the
// order of fp32 roundings:
//   amax  = largest finite |w| of the matrix, or QuantizeOptions::shared_amax (q/k/v and gate/up
//           share one G; it must be >= the matrix's own amax, else blocks would be clipped).
//   G     = (1 / max(amax, FLT_MIN)) * 2688, rounded twice as torch does for 2688.0 / tensor;
//           a non-finite G (all-zero or near-zero tensor) becomes 1.
//   s_b   = E4M3(G * (block_amax / 6)), saturating at 448. A zero result (all-zero block, or a
//           scale below half of E4M3's smallest subnormal 2^-9) becomes 0.125, compressed-tensors'
//           guard against dividing by zero; such blocks still encode as zeros.
//   e_b   = s_b / G  (the effective block step; the paper's s_b * global).
//   code  = E2M1(w / e_b): round to nearest even (ties 0.25->0, 0.75->1, 1.25->1, 1.75->2,
//           2.5->2, 3.5->4, 5->4), saturating at +-6.
//   w'    = E2M1ToFloat(code) * e_b.
// Signs of zero: a weight of exactly +-0 is stored as +0 (compressed-tensors' sign(x) is 0
// there), a negative weight that rounds to zero as -0 (nibble 8), both as in compressed-tensors.
// Non-finite weights (our definition; the reference leaves them undefined): they are left out
// of every amax, +-inf saturates to +-6 * e_b and NaN is stored as 0.
// Activations (w4a4): G_a is the stored input_global_scale, used as is (or, when none is given,
// computed from the row's own finite amax exactly as G from amax); block scales are computed per
// token as for weights, and x is replaced by its dequantized image. compressed-tensors stores G_a
// as "input_global_scale"; the loader passes it unchanged. NaN activations stay NaN.
// Idempotence (static G_a): re-quantizing a dequantized row gives the same row whenever every
// block scale is an E4M3 normal (>= 2^-6): the scale is then off by at most 2^-4, so the block
// max maps to exactly +-6 again and the second pass finds the same scale. A subnormal scale can
// be rounded up by a large fraction, after which the block max maps to 4 and the second pass
// picks a smaller scale.
// Byte identity with compressed-tensors holds for fp32 input (what our quantizer feeds); when
// llm-compressor quantizes bf16 weights its torch ops may run in bf16, so bytes may differ in rare
// rounding cases, which does not matter for reading: DequantizeRow reproduces compressed-tensors'
// fp32 dequantization of whatever bytes are stored.
#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_join.h"
#include "engine/quant/fp8_e4m3.h"
#include "engine/quant/nvfp4_activation.h"
#include "engine/quant/weight_codec.h"

namespace dq {
namespace {

constexpr int kBlock = 16;
constexpr float kScaleForZero = 0.125f;  // compressed-tensors' eps for an E4M3 scale

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

// compressed-tensors computes 6 * 448 / amax as a Python float over a tensor, which torch
// evaluates as reciprocal(amax) * 2688: two roundings, and one ulp away from 2688 / amax for
// some amax (e.g. 11). We round the same way so that the stored global scale is identical.
float GlobalScaleFromAmax(float amax) {
  const float g = (1.0f / std::fmax(amax, FLT_MIN)) * (kE4M3Max * kE2M1Max);
  return std::isfinite(g) ? g : 1.0f;
}

uint8_t BlockScaleCode(float block_amax, float global) {
  const uint8_t code = FloatToE4M3(global * (block_amax / kE2M1Max));
  return E4M3ToFloat(code) == 0.0f ? FloatToE4M3(kScaleForZero) : code;
}

// Encodes one weight; exact zeros become +0 as compressed-tensors' sign(x) * |q| makes them.
uint8_t EncodeWeight(float w, float step) {
  if (std::isnan(w) || w == 0.0f) return 0;
  return FloatToE2M1(w / step);
}

// Replaces x[0..n) by its quantize-dequantize image under global scale `global` (one block).
void FakeQuantBlock(float* x, int64_t n, float global) {
  const float step = E4M3ToFloat(BlockScaleCode(FiniteAmax(x, n), global)) / global;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) continue;
    x[i] = E2M1ToFloat(FloatToE2M1(x[i] / step)) * step;
  }
}

absl::Status CheckPart(const QuantizedView& q, const std::string& name, const char* suffix,
                       DType dtype, const std::vector<int64_t>& shape, const char* what) {
  auto it = q.parts.find(suffix);
  if (it == q.parts.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' (nvfp4) has no component '", suffix, "' (", what,
        "); an nvfp4 checkpoint needs weight_packed, weight_scale and weight_global_scale as "
        "compressed-tensors' nvfp4-pack-quantized format writes them"));
  }
  const ComponentView& c = it->second;
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (c.dtype != dtype || c.shape != shape || c.data == nullptr ||
      c.nbytes != numel * DTypeBlockBytes(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' (nvfp4) component '", suffix, "' is ", DTypeName(c.dtype),
                     " ", ShapeString(c.shape), " with ", c.nbytes, " bytes; expected ",
                     DTypeName(dtype), " ", ShapeString(shape), " (", what, ")"));
  }
  return absl::OkStatus();
}

float ReadGlobal(const QuantizedView& q) {
  float g;
  std::memcpy(&g, q.parts.at("weight_global_scale").data, sizeof g);
  return g;
}

class Nvfp4WeightCodec final : public WeightCodec {
 public:
  std::string_view scheme() const override { return "nvfp4"; }

  double BitsPerWeight(int64_t out, int64_t in, int group_size) const override {
    return 4.0 + 8.0 / kBlock + 32.0 / (static_cast<double>(out) * static_cast<double>(in));
  }

  absl::StatusOr<QuantizedTensors> Quantize(const float* w, int64_t out, int64_t in,
                                            const QuantizeOptions& options) const override;

  absl::Status Validate(const QuantizedView& q, const std::string& tensor_name) const override;

  void DequantizeRow(const QuantizedView& q, int64_t r, float* dst) const override {
    const int64_t in = q.in_features;
    const uint8_t* packed = q.parts.at("weight_packed").data + r * (in / 2);
    const uint8_t* scales = q.parts.at("weight_scale").data + r * (in / kBlock);
    const float global = ReadGlobal(q);
    // The 16 signed E2M1 values, looked up per nibble (this is the CPU decode hot loop).
    static const std::array<float, 16> kValues = [] {
      std::array<float, 16> v{};
      for (int c = 0; c < 16; ++c) v[c] = E2M1ToFloat(static_cast<uint8_t>(c));
      return v;
    }();
    for (int64_t b = 0; b < in / kBlock; ++b) {
      const float step = E4M3ToFloat(scales[b]) / global;
      for (int j = 0; j < kBlock / 2; ++j) {
        const uint8_t byte = packed[b * (kBlock / 2) + j];
        dst[b * kBlock + 2 * j] = kValues[byte & 0xF] * step;
        dst[b * kBlock + 2 * j + 1] = kValues[byte >> 4] * step;
      }
    }
  }

  bool Supports(ComputeMode mode) const override {
    return mode == ComputeMode::kWeightOnly || mode == ComputeMode::kW4A4;
  }

  void QuantizeActivations(ComputeMode mode, float act_global_scale, float* x,
                           int64_t n) const override {
    if (mode != ComputeMode::kW4A4) return;
    // The stored static scale is used as is (re-deriving it from an amax can move it an ulp).
    const float global =
        act_global_scale > 0.0f ? act_global_scale : GlobalScaleFromAmax(FiniteAmax(x, n));
    // A trailing partial block (n not a multiple of 16) is quantized as a shorter block.
    for (int64_t b = 0; b < n; b += kBlock) {
      FakeQuantBlock(x + b, std::min<int64_t>(kBlock, n - b), global);
    }
  }
};

absl::StatusOr<QuantizedTensors> Nvfp4WeightCodec::Quantize(const float* w, int64_t out, int64_t in,
                                                            const QuantizeOptions& options) const {
  if (out <= 0 || in <= 0 || in % kBlock != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("nvfp4: cannot quantize a [", out, ", ", in, "] matrix; in_features must be ",
                     "a positive multiple of 16 (keep this layer in bf16 or pick another format)"));
  }
  const float own_amax = FiniteAmax(w, out * in);
  float amax = own_amax;
  if (options.shared_amax > 0.0f) {
    if (!std::isfinite(options.shared_amax) || options.shared_amax < own_amax) {
      return absl::InvalidArgumentError(absl::StrCat(
          "nvfp4: shared_amax ", options.shared_amax, " is below this matrix's amax ", own_amax,
          " (or not finite); pass the largest amax over all matrices that share the scale"));
    }
    amax = options.shared_amax;
  }
  const float global = GlobalScaleFromAmax(amax);
  const int64_t nblocks = in / kBlock;
  std::vector<uint8_t> packed(static_cast<size_t>(out * in / 2));
  std::vector<uint8_t> scales(static_cast<size_t>(out * nblocks));
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t b = 0; b < nblocks; ++b) {
      const float* blk = w + r * in + b * kBlock;
      const uint8_t sc = BlockScaleCode(FiniteAmax(blk, kBlock), global);
      scales[r * nblocks + b] = sc;
      const float step = E4M3ToFloat(sc) / global;
      uint8_t* dst = packed.data() + (r * in + b * kBlock) / 2;
      for (int j = 0; j < kBlock / 2; ++j) {
        dst[j] = static_cast<uint8_t>(EncodeWeight(blk[2 * j], step) |
                                      (EncodeWeight(blk[2 * j + 1], step) << 4));
      }
    }
  }
  std::vector<uint8_t> gbytes(sizeof(float));
  std::memcpy(gbytes.data(), &global, sizeof global);
  QuantizedTensors t;
  t.view.scheme = "nvfp4";
  t.view.out_features = out;
  t.view.in_features = in;
  t.view.group_size = kBlock;
  t.Add("weight_packed", DType::kU8, {out, in / 2}, std::move(packed));
  t.Add("weight_scale", DType::kF8E4M3, {out, nblocks}, std::move(scales));
  t.Add("weight_global_scale", DType::kF32, {1}, std::move(gbytes));
  return t;
}

absl::Status Nvfp4WeightCodec::Validate(const QuantizedView& q,
                                        const std::string& tensor_name) const {
  const int64_t out = q.out_features;
  const int64_t in = q.in_features;
  if (out <= 0 || in <= 0 || in % kBlock != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor_name, "' (nvfp4) has shape [", out, ", ", in,
                     "]; in_features must be a positive multiple of 16"));
  }
  if (q.group_size != 0 && q.group_size != kBlock) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor_name, "' (nvfp4) has group_size ", q.group_size,
                     "; nvfp4 blocks are always 16 (group_size 32 is MXFP4, not supported)"));
  }
  DQ_RETURN_IF_ERROR(CheckPart(q, tensor_name, "weight_packed", DType::kU8, {out, in / 2},
                               "two E2M1 values per byte"));
  DQ_RETURN_IF_ERROR(CheckPart(q, tensor_name, "weight_scale", DType::kF8E4M3, {out, in / kBlock},
                               "one E4M3 scale per 16 inputs"));
  // compressed-tensors writes shape [1]; a scalar [] holds the same single value.
  auto git = q.parts.find("weight_global_scale");
  const bool scalar = git != q.parts.end() && git->second.shape.empty();
  DQ_RETURN_IF_ERROR(CheckPart(q, tensor_name, "weight_global_scale", DType::kF32,
                               scalar ? std::vector<int64_t>{} : std::vector<int64_t>{1},
                               "per-tensor 6*448/amax"));
  const float g = ReadGlobal(q);
  if (!std::isfinite(g) || g <= 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor_name, "' (nvfp4) has weight_global_scale ", g,
                     "; it must be a positive finite number (6*448/amax); the checkpoint is "
                     "corrupt or uses another convention"));
  }
  return absl::OkStatus();
}

}  // namespace

float PackNvfp4ActivationRow(const float* x, int64_t n, float act_global_scale, uint8_t* packed,
                             uint8_t* scales) {
  // QuantizeActivations' steps (FakeQuantBlock), keeping the codes.
  const float global =
      act_global_scale > 0.0f ? act_global_scale : GlobalScaleFromAmax(FiniteAmax(x, n));
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float* blk = x + b * kBlock;
    const uint8_t sc = BlockScaleCode(FiniteAmax(blk, kBlock), global);
    scales[b] = sc;
    const float step = E4M3ToFloat(sc) / global;
    for (int j = 0; j < kBlock / 2; ++j) {
      packed[b * kBlock / 2 + j] = static_cast<uint8_t>(FloatToE2M1(blk[2 * j] / step) |
                                                        (FloatToE2M1(blk[2 * j + 1] / step) << 4));
    }
  }
  return global;
}

const WeightCodec* Nvfp4Codec() {
  static const Nvfp4WeightCodec codec;
  return &codec;
}

}  // namespace dq
