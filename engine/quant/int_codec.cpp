// The int2/int3/int4/int8 codecs; numerics and layout are specified in int_codec.h.
#include "engine/quant/int_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_join.h"
#include "engine/quant/weight_codec.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace dq {

bool ChooseIntGroupParams(const float* w, int64_t n, int bits, IntGroupParams* p) {
  const int qmax = (1 << bits) - 1;
  float mn = w[0], mx = w[0];
  for (int64_t i = 1; i < n; ++i) {
    mn = std::min(mn, w[i]);
    mx = std::max(mx, w[i]);
  }
  p->zero = 0;
  if (mn == mx) {  // constant group: one step of |c| reproduces c exactly when c fits f16
    p->scale_f16 = F32ToF16(std::fabs(mn));
    if (p->scale_f16 == 0x7c00u) return false;
    if (p->scale_f16 == 0) p->scale_f16 = F32ToF16(1.0f);  // 0, or below f16: w' = 0
    p->scale = F16ToF32(p->scale_f16);
    p->zero = mn < 0.0f ? 1 : 0;
    return true;
  }
  const float lo = std::min(mn, 0.0f), hi = std::max(mx, 0.0f);
  const float range = hi - lo;
  uint16_t s = F32ToF16(range / static_cast<float>(qmax));
  if (s == 0) s = 1;  // smallest subnormal: the grid must still span the group
  // f16 rounding may shrink the grid below the group's range; one ulp up restores it.
  if (static_cast<float>(qmax) * F16ToF32(s) < range) ++s;
  if (s >= 0x7c00u) return false;
  p->scale_f16 = s;
  p->scale = F16ToF32(s);
  const float z = std::nearbyint(-lo / p->scale);
  p->zero = static_cast<uint8_t>(std::clamp(z, 0.0f, static_cast<float>(qmax)));
  return true;
}

uint8_t QuantizeIntValue(float w, const IntGroupParams& p, int bits) {
  const float qmax = static_cast<float>((1 << bits) - 1);
  const float q = std::nearbyint(w / p.scale) + static_cast<float>(p.zero);
  return static_cast<uint8_t>(std::clamp(q, 0.0f, qmax));
}

void PackBits(const uint8_t* codes, int64_t n, int bits, uint8_t* dst) {
  std::memset(dst, 0, PackedBytes(n, bits));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t bit = i * bits;
    // A code spans at most two bytes (bits <= 8); the high part lands in the next byte.
    const uint32_t v = static_cast<uint32_t>(codes[i]) << (bit % 8);
    dst[bit / 8] |= static_cast<uint8_t>(v);
    if ((bit % 8) + bits > 8) dst[bit / 8 + 1] |= static_cast<uint8_t>(v >> 8);
  }
}

void UnpackBits(const uint8_t* src, int64_t n, int bits, uint8_t* codes) {
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t bit = i * bits;
    uint32_t v = src[bit / 8];
    if ((bit % 8) + bits > 8) v |= static_cast<uint32_t>(src[bit / 8 + 1]) << 8;
    codes[i] = static_cast<uint8_t>((v >> (bit % 8)) & mask);
  }
}

namespace {

int EffectiveGroup(int group_size) { return group_size == 0 ? kIntDefaultGroupSize : group_size; }

absl::Status CheckGroup(int group, int64_t in, const std::string& what) {
  if (std::find(std::begin(kIntGroupSizes), std::end(kIntGroupSizes), group) ==
      std::end(kIntGroupSizes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": group size ", group, " is not supported; use 32, 64 or 128"));
  }
  if (in <= 0 || in % group != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": in_features ", in,
                                                   " is not a positive multiple of the group size ",
                                                   group, "; pick a group size that divides it"));
  }
  return absl::OkStatus();
}

std::string ShapeStr(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

// Checks one component's presence, dtype, shape and byte count.
absl::Status CheckPart(const QuantizedView& q, const std::string& tensor, const std::string& name,
                       DType dtype, std::vector<int64_t> shape) {
  const std::string where = absl::StrCat(tensor, ": ", q.scheme, " component '", name, "'");
  auto it = q.parts.find(name);
  if (it == q.parts.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(tensor, ": ", q.scheme, " weights need a component '", name, "' (",
                     DTypeName(dtype), " ", ShapeStr(shape), "); the checkpoint lacks it"));
  }
  const ComponentView& c = it->second;
  if (c.dtype != dtype || c.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " is ", DTypeName(c.dtype), " ", ShapeStr(c.shape), ", expected ", DTypeName(dtype),
        " ", ShapeStr(shape), " for a [", q.out_features, ", ", q.in_features, "] matrix"));
  }
  const int64_t need = shape[0] * DTypeRowBytes(dtype, shape[1]);
  if (c.data == nullptr || c.nbytes != need) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " holds ", c.nbytes, " bytes, expected ", need));
  }
  return absl::OkStatus();
}

class IntCodecImpl : public WeightCodec {
 public:
  explicit IntCodecImpl(int bits) : bits_(bits), name_(absl::StrCat("int", bits)) {}

  std::string_view scheme() const override { return name_; }

  double BitsPerWeight(int64_t out, int64_t in, int group_size) const override {
    const int g = EffectiveGroup(group_size);
    const double bytes = PackedBytes(in, bits_) + static_cast<double>(in / g) * (2 + 1);
    return bytes * 8.0 / static_cast<double>(in);
  }

  absl::StatusOr<QuantizedTensors> Quantize(const float* w, int64_t out, int64_t in,
                                            const QuantizeOptions& options) const override;
  absl::Status Validate(const QuantizedView& q, const std::string& tensor_name) const override;
  void DequantizeRow(const QuantizedView& q, int64_t r, float* dst) const override;

 private:
  int bits_;
  std::string name_;
};

absl::StatusOr<QuantizedTensors> IntCodecImpl::Quantize(const float* w, int64_t out, int64_t in,
                                                        const QuantizeOptions& options) const {
  const int g = EffectiveGroup(options.group_size);
  DQ_RETURN_IF_ERROR(CheckGroup(g, in, absl::StrCat(name_, " quantization")));
  if (out <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": out_features must be positive"));
  }
  const int64_t ng = in / g, row_bytes = PackedBytes(in, bits_);
  std::vector<uint8_t> qweight(out * row_bytes), scales(out * ng * 2), zeros(out * ng);
  std::vector<uint8_t> codes(in);
  for (int64_t r = 0; r < out; ++r) {
    const float* row = w + r * in;
    for (int64_t c = 0; c < in; ++c) {
      if (!std::isfinite(row[c])) {
        return absl::InvalidArgumentError(absl::StrCat(name_, ": weight [", r, ", ", c, "] is ",
                                                       row[c], "; only finite weights quantize"));
      }
    }
    for (int64_t gi = 0; gi < ng; ++gi) {
      IntGroupParams p;
      if (!ChooseIntGroupParams(row + gi * g, g, bits_, &p)) {
        return absl::InvalidArgumentError(absl::StrCat(
            name_, ": row ", r, " group ", gi, " spans more than f16 scales can hold (scale > ",
            "65504); rescale the weights or keep this matrix in bf16"));
      }
      std::memcpy(&scales[(r * ng + gi) * 2], &p.scale_f16, 2);
      zeros[r * ng + gi] = p.zero;
      for (int64_t j = 0; j < g; ++j) {
        codes[gi * g + j] = QuantizeIntValue(row[gi * g + j], p, bits_);
      }
    }
    PackBits(codes.data(), in, bits_, &qweight[r * row_bytes]);
  }
  QuantizedTensors t;
  t.view.scheme = name_;
  t.view.out_features = out;
  t.view.in_features = in;
  t.view.group_size = g;
  t.Add("qweight", DType::kU8, {out, row_bytes}, std::move(qweight));
  t.Add("scales", DType::kF16, {out, ng}, std::move(scales));
  t.Add("zeros", DType::kU8, {out, ng}, std::move(zeros));
  return t;
}

absl::Status IntCodecImpl::Validate(const QuantizedView& q, const std::string& tensor) const {
  if (q.out_features <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(tensor, ": ", name_, " matrix has out_features ", q.out_features));
  }
  const int g = EffectiveGroup(q.group_size);
  DQ_RETURN_IF_ERROR(CheckGroup(g, q.in_features, tensor + " (" + name_ + ")"));
  const int64_t out = q.out_features, ng = q.in_features / g;
  DQ_RETURN_IF_ERROR(
      CheckPart(q, tensor, "qweight", DType::kU8, {out, PackedBytes(q.in_features, bits_)}));
  DQ_RETURN_IF_ERROR(CheckPart(q, tensor, "scales", DType::kF16, {out, ng}));
  return CheckPart(q, tensor, "zeros", DType::kU8, {out, ng});
}

// Every 8 consecutive codes of a group fill exactly kBits bytes (groups are multiples of 32),
// so one group decodes as g / 8 independent 8-code chunks.
template <int kBits>
uint64_t LoadChunk(const uint8_t* src) {
  if constexpr (kBits == 3) {  // no 3-byte load: assemble it (a 3-byte memcpy is a call)
    return src[0] | static_cast<uint32_t>(src[1]) << 8 | static_cast<uint32_t>(src[2]) << 16;
  } else {
    uint64_t v = 0;
    std::memcpy(&v, src, kBits);
    return v;
  }
}

// Writes float(code - z) * s for one group: the reference product, one rounding, so the AVX2
// and the scalar paths agree bit for bit.
template <int kBits>
void DecodeGroup(const uint8_t* src, int g, int z, float s, float* dst) {
#if defined(__AVX2__)
  const __m256i shifts =
      _mm256_setr_epi32(0, kBits, 2 * kBits, 3 * kBits, 4 * kBits, 5 * kBits, 6 * kBits, 7 * kBits);
  const __m256i mask = _mm256_set1_epi32((1 << kBits) - 1), vz = _mm256_set1_epi32(z);
  const __m256 vs = _mm256_set1_ps(s);
  for (int j = 0; j < g / 8; ++j) {
    __m256i codes;
    if constexpr (kBits == 8) {
      codes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + 8 * j)));
    } else {
      const auto v = static_cast<int32_t>(LoadChunk<kBits>(src + kBits * j));
      codes = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(v), shifts), mask);
    }
    const __m256 f = _mm256_cvtepi32_ps(_mm256_sub_epi32(codes, vz));
    _mm256_storeu_ps(dst + 8 * j, _mm256_mul_ps(f, vs));
  }
#else
  for (int j = 0; j < g / 8; ++j) {
    const uint64_t v = LoadChunk<kBits>(src + kBits * j);
    for (int k = 0; k < 8; ++k) {
      const int code = static_cast<int>((v >> (kBits * k)) & ((1u << kBits) - 1));
      dst[8 * j + k] = static_cast<float>(code - z) * s;
    }
  }
#endif
}

void IntCodecImpl::DequantizeRow(const QuantizedView& q, int64_t r, float* dst) const {
  const int g = EffectiveGroup(q.group_size);
  const int64_t ng = q.in_features / g, row_bytes = PackedBytes(q.in_features, bits_);
  const uint8_t* qrow = q.parts.at("qweight").data + r * row_bytes;
  const uint8_t* srow = q.parts.at("scales").data + r * ng * 2;
  const uint8_t* zrow = q.parts.at("zeros").data + r * ng;
  const int64_t group_bytes = g * bits_ / 8;
  for (int64_t gi = 0; gi < ng; ++gi) {
    uint16_t h;
    std::memcpy(&h, srow + gi * 2, 2);
    const float s = F16ToF32(h);
    const uint8_t* src = qrow + gi * group_bytes;
    float* d = dst + gi * g;
    switch (bits_) {
      case 2:
        DecodeGroup<2>(src, g, zrow[gi], s, d);
        break;
      case 3:
        DecodeGroup<3>(src, g, zrow[gi], s, d);
        break;
      case 4:
        DecodeGroup<4>(src, g, zrow[gi], s, d);
        break;
      default:
        DecodeGroup<8>(src, g, zrow[gi], s, d);
    }
  }
}

}  // namespace

const WeightCodec* IntCodec(int bits) {
  static const IntCodecImpl int2(2), int3(3), int4(4), int8(8);
  switch (bits) {
    case 2:
      return &int2;
    case 3:
      return &int3;
    case 4:
      return &int4;
    case 8:
      return &int8;
  }
  return nullptr;
}

}  // namespace dq
