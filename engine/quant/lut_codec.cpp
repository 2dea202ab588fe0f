// The lut2/lut3 codecs; numerics and layout are specified in lut_codec.h.
#include "engine/quant/lut_codec.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_join.h"
#include "engine/quant/fp8_e4m3.h"
#include "engine/quant/int_codec.h"
#include "engine/quant/weight_codec.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace dq {
namespace {

// Midpoints between adjacent levels, in fp32 exactly as the header defines them.
template <int N>
struct Midpoints {
  float m[N - 1];
  constexpr explicit Midpoints(const float (&l)[N]) : m{} {
    for (int i = 0; i + 1 < N; ++i) m[i] = 0.5f * (l[i] + l[i + 1]);
  }
};
constexpr Midpoints<8> kLut3Mid(kLut3Levels);
constexpr Midpoints<4> kLut2Mid(kLut2Levels);

uint8_t ZeroCode(int bits) { return bits == 3 ? 3 : 1; }

}  // namespace

const float* LutLevels(int bits) {
  if (bits == 3) return kLut3Levels;
  if (bits == 2) return kLut2Levels;
  return nullptr;
}

uint8_t LutNearestCode(float x, int bits) {
  const float* mid = bits == 3 ? kLut3Mid.m : kLut2Mid.m;
  const int n = (1 << bits) - 1;
  uint8_t code = 0;
  for (int i = 0; i < n; ++i) code += x > mid[i] ? 1 : 0;
  return code;
}

// Same fp32 steps as nvfp4's GlobalScaleFromAmax, so both schemes store the same G.
float LutGlobalScale(float amax) {
  const float g = (1.0f / std::fmax(amax, FLT_MIN)) * (kE4M3Max * 6.0f);
  return std::isfinite(g) ? g : 1.0f;
}

uint8_t QuantizeLutBlock(const float* w, int bits, float global, uint8_t* codes) {
  int arg = 0;
  for (int j = 1; j < kLutBlock; ++j) {
    if (std::fabs(w[j]) > std::fabs(w[arg])) arg = j;
  }
  const uint8_t sbyte = FloatToE4M3(global * (w[arg] / 6.0f));
  const float s = E4M3ToFloat(sbyte);
  if (s == 0.0f) {  // all zero, or too small for E4M3: 0 is the closest we can store
    std::memset(codes, ZeroCode(bits), kLutBlock);
    return 0x00;
  }
  const float step = s / global;
  for (int j = 0; j < kLutBlock; ++j) codes[j] = LutNearestCode(w[j] / step, bits);
  return sbyte;
}

namespace {

std::string ShapeStr(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

float ReadGlobal(const QuantizedView& q) {
  float g;
  std::memcpy(&g, q.parts.at("weight_global_scale").data, sizeof g);
  return g;
}

class LutCodecImpl : public WeightCodec {
 public:
  explicit LutCodecImpl(int bits) : bits_(bits), name_(absl::StrCat("lut", bits)) {}

  std::string_view scheme() const override { return name_; }

  double BitsPerWeight(int64_t out, int64_t in, int group_size) const override {
    return static_cast<double>(bits_) + 8.0 / kLutBlock +
           32.0 / (static_cast<double>(out) * static_cast<double>(in));
  }

  absl::StatusOr<QuantizedTensors> Quantize(const float* w, int64_t out, int64_t in,
                                            const QuantizeOptions& options) const override;
  absl::Status Validate(const QuantizedView& q, const std::string& tensor_name) const override;
  void DequantizeRow(const QuantizedView& q, int64_t r, float* dst) const override;

 private:
  absl::Status CheckPart(const QuantizedView& q, const std::string& tensor, const std::string& name,
                         DType dtype, std::vector<int64_t> shape) const;
  int bits_;
  std::string name_;
};

absl::StatusOr<QuantizedTensors> LutCodecImpl::Quantize(const float* w, int64_t out, int64_t in,
                                                        const QuantizeOptions& options) const {
  if (out <= 0 || in <= 0 || in % kLutBlock != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": cannot quantize a [", out, ", ", in, "] matrix; in_features must ",
                     "be a positive multiple of ", kLutBlock, " (the block size)"));
  }
  float own_amax = 0.0f;
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t c = 0; c < in; ++c) {
      const float x = w[r * in + c];
      if (!std::isfinite(x)) {
        return absl::InvalidArgumentError(absl::StrCat(name_, ": weight [", r, ", ", c, "] is ", x,
                                                       "; only finite weights quantize"));
      }
      own_amax = std::fmax(own_amax, std::fabs(x));
    }
  }
  float amax = own_amax;
  if (options.shared_amax > 0.0f) {
    if (!std::isfinite(options.shared_amax) || options.shared_amax < own_amax) {
      return absl::InvalidArgumentError(absl::StrCat(
          name_, ": shared_amax ", options.shared_amax, " is below this matrix's amax ", own_amax,
          " (or not finite); pass the largest amax over all matrices that share the scale"));
    }
    amax = options.shared_amax;
  }
  const float global = LutGlobalScale(amax);
  const int64_t nb = in / kLutBlock, row_bytes = in * bits_ / 8;
  std::vector<uint8_t> packed(out * row_bytes), scales(out * nb), codes(in);
  for (int64_t r = 0; r < out; ++r) {
    const float* row = w + r * in;
    for (int64_t b = 0; b < nb; ++b) {
      scales[r * nb + b] =
          QuantizeLutBlock(row + b * kLutBlock, bits_, global, codes.data() + b * kLutBlock);
    }
    PackBits(codes.data(), in, bits_, &packed[r * row_bytes]);
  }
  std::vector<uint8_t> gbytes(sizeof(float));
  std::memcpy(gbytes.data(), &global, sizeof global);
  QuantizedTensors t;
  t.view.scheme = name_;
  t.view.out_features = out;
  t.view.in_features = in;
  t.view.group_size = kLutBlock;
  t.Add("weight_packed", DType::kU8, {out, row_bytes}, std::move(packed));
  t.Add("weight_scale", DType::kF8E4M3, {out, nb}, std::move(scales));
  t.Add("weight_global_scale", DType::kF32, {1}, std::move(gbytes));
  return t;
}

absl::Status LutCodecImpl::CheckPart(const QuantizedView& q, const std::string& tensor,
                                     const std::string& name, DType dtype,
                                     std::vector<int64_t> shape) const {
  auto it = q.parts.find(name);
  if (it == q.parts.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(tensor, ": ", name_, " weights need a component '", name, "' (",
                     DTypeName(dtype), " ", ShapeStr(shape),
                     name == "weight_global_scale" ? ", the per-tensor scale 6 * 448 / amax" : "",
                     "); the checkpoint lacks it"));
  }
  const ComponentView& c = it->second;
  const std::string where = absl::StrCat(tensor, ": ", name_, " component '", name, "'");
  if (c.dtype != dtype || c.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " is ", DTypeName(c.dtype), " ", ShapeStr(c.shape), ", expected ", DTypeName(dtype),
        " ", ShapeStr(shape), " for a [", q.out_features, ", ", q.in_features, "] matrix"));
  }
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const int64_t nbytes = numel * DTypeBlockBytes(dtype);
  if (c.data == nullptr || c.nbytes != nbytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " holds ", c.nbytes, " bytes, expected ", nbytes));
  }
  return absl::OkStatus();
}

absl::Status LutCodecImpl::Validate(const QuantizedView& q, const std::string& tensor) const {
  if (q.out_features <= 0 || q.in_features <= 0 || q.in_features % kLutBlock != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(tensor, ": ", name_, " needs in_features a positive multiple of ", kLutBlock,
                     ", got a [", q.out_features, ", ", q.in_features, "] matrix"));
  }
  const int64_t out = q.out_features;
  DQ_RETURN_IF_ERROR(
      CheckPart(q, tensor, "weight_packed", DType::kU8, {out, q.in_features * bits_ / 8}));
  DQ_RETURN_IF_ERROR(
      CheckPart(q, tensor, "weight_scale", DType::kF8E4M3, {out, q.in_features / kLutBlock}));
  // Shape [1] as we (and compressed-tensors) write it; a scalar [] holds the same one value.
  auto git = q.parts.find("weight_global_scale");
  const bool scalar = git != q.parts.end() && git->second.shape.empty();
  DQ_RETURN_IF_ERROR(CheckPart(q, tensor, "weight_global_scale", DType::kF32,
                               scalar ? std::vector<int64_t>{} : std::vector<int64_t>{1}));
  const float g = ReadGlobal(q);
  if (!std::isfinite(g) || g <= 0.0f) {
    return absl::InvalidArgumentError(absl::StrCat(
        tensor, ": ", name_, " component 'weight_global_scale' is ", g,
        "; it must be a positive finite f32 (6 * 448 / amax, the reciprocal of the paper's "
        "global scale); the checkpoint is corrupt or uses another convention"));
  }
  return absl::OkStatus();
}

// One block's 16 codes (kBits * 2 bytes) as one little-endian integer.
template <int kBits>
uint64_t LoadBlock(const uint8_t* src) {
  uint32_t lo;
  std::memcpy(&lo, src, 4);
  if constexpr (kBits == 2) return lo;
  uint16_t hi;
  std::memcpy(&hi, src + 4, 2);
  return lo | static_cast<uint64_t>(hi) << 32;
}

// w' = levels[code] * e with e = s / global, one fp32 product per value (the table lanes are
// exactly those products, so the AVX2 lookup and the scalar one agree bit for bit).
template <int kBits>
void DecodeLutRow(const uint8_t* src, const uint8_t* sc, float global, int64_t nb, float* dst) {
  constexpr int kBlockBytes = kLutBlock * kBits / 8;
  constexpr uint32_t kMask = (1u << kBits) - 1;
  alignas(32) float levels[8] = {};
  for (uint32_t k = 0; k <= kMask; ++k) levels[k] = LutLevels(kBits)[k];
#if defined(__AVX2__)
  const __m256 vlevels = _mm256_load_ps(levels);
  const __m256i shifts =
      _mm256_setr_epi32(0, kBits, 2 * kBits, 3 * kBits, 4 * kBits, 5 * kBits, 6 * kBits, 7 * kBits);
  const __m256i vmask = _mm256_set1_epi32(kMask);
  for (int64_t b = 0; b < nb; ++b, src += kBlockBytes, dst += kLutBlock) {
    const __m256 table = _mm256_mul_ps(vlevels, _mm256_set1_ps(E4M3ToFloat(sc[b]) / global));
    const uint64_t v = LoadBlock<kBits>(src);
    for (int half = 0; half < 2; ++half) {  // 8 codes each: one 8-entry permute
      const auto chunk = static_cast<int32_t>(v >> (8 * kBits * half));
      const __m256i codes =
          _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(chunk), shifts), vmask);
      _mm256_storeu_ps(dst + 8 * half, _mm256_permutevar8x32_ps(table, codes));
    }
  }
#else
  float table[8];
  for (int64_t b = 0; b < nb; ++b, src += kBlockBytes, dst += kLutBlock) {
    const float e = E4M3ToFloat(sc[b]) / global;
    for (uint32_t k = 0; k <= kMask; ++k) table[k] = levels[k] * e;
    const uint64_t v = LoadBlock<kBits>(src);
    for (int j = 0; j < kLutBlock; ++j) dst[j] = table[(v >> (kBits * j)) & kMask];
  }
#endif
}

void LutCodecImpl::DequantizeRow(const QuantizedView& q, int64_t r, float* dst) const {
  const int64_t nb = q.in_features / kLutBlock, row_bytes = q.in_features * bits_ / 8;
  const uint8_t* src = q.parts.at("weight_packed").data + r * row_bytes;
  const uint8_t* sc = q.parts.at("weight_scale").data + r * nb;
  const float global = ReadGlobal(q);
  if (bits_ == 3) {
    DecodeLutRow<3>(src, sc, global, nb, dst);
  } else {
    DecodeLutRow<2>(src, sc, global, nb, dst);
  }
}

}  // namespace

const WeightCodec* LutCodec(int bits) {
  static const LutCodecImpl lut2(2), lut3(3);
  if (bits == 2) return &lut2;
  if (bits == 3) return &lut3;
  return nullptr;
}

}  // namespace dq
