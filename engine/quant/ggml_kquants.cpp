// Portable reference dequantization of the k-quants (layouts in ggml_kquants.h). These loops
// follow the element order of the format, not speed; ggml_kquants_avx2.cpp has the fast paths.
#include "engine/quant/ggml_kquants.h"

namespace dq::ggml {

void DequantQ2_KRef(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += 84, dst += kQKK) {
    const uint8_t* scales = src;
    const uint8_t* qs = src + 16;
    const float d = LoadF16(src + 80);
    const float dmin = LoadF16(src + 82);
    for (int e = 0; e < kQKK; ++e) {
      const int h = e / 128, j = (e / 32) % 4, l = e % 32;
      const int q = (qs[32 * h + l] >> (2 * j)) & 3;
      const uint8_t sm = scales[e / 16];
      const float dl = d * static_cast<float>(sm & 15);
      const float ml = dmin * static_cast<float>(sm >> 4);
      dst[e] = Opaque(dl * static_cast<float>(q)) - ml;
    }
  }
}

void DequantQ3_KRef(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += 110, dst += kQKK) {
    const uint8_t* hmask = src;
    const uint8_t* qs = src + 32;
    const uint8_t* scales = src + 96;
    const float d = LoadF16(src + 108);
    for (int e = 0; e < kQKK; ++e) {
      const int h = e / 128, j = (e / 32) % 4, l = e % 32;
      const int low = (qs[32 * h + l] >> (2 * j)) & 3;
      const int high = (hmask[l] >> (4 * h + j)) & 1;
      const float dl = d * static_cast<float>(Q3KScale(scales, e / 16));
      dst[e] = dl * static_cast<float>(low - (high ? 0 : 4));
    }
  }
}

namespace {

// Q4_K and Q5_K share everything but the fifth bit (`qh` null for Q4_K).
void DequantQ45_KRef(const uint8_t* src, const uint8_t* qh, const uint8_t* qs, float* dst) {
  const float d = LoadF16(src);
  const float dmin = LoadF16(src + 2);
  for (int e = 0; e < kQKK; ++e) {
    const int c = e / 64, k = (e / 32) % 2, l = e % 32;
    int q = (qs[32 * c + l] >> (4 * k)) & 15;
    if (qh != nullptr) q |= ((qh[l] >> (2 * c + k)) & 1) << 4;
    int sc, mn;
    KScaleMin(src + 4, 2 * c + k, &sc, &mn);
    const float dl = d * static_cast<float>(sc);
    const float ml = dmin * static_cast<float>(mn);
    dst[e] = Opaque(dl * static_cast<float>(q)) - ml;
  }
}

}  // namespace

void DequantQ4_KRef(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += 144, dst += kQKK) {
    DequantQ45_KRef(src, nullptr, src + 16, dst);
  }
}

void DequantQ5_KRef(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += 176, dst += kQKK) {
    DequantQ45_KRef(src, src + 16, src + 48, dst);
  }
}

void DequantQ6_KRef(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += 210, dst += kQKK) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const int8_t* scales = reinterpret_cast<const int8_t*>(src + 192);
    const float d = LoadF16(src + 208);
    for (int e = 0; e < kQKK; ++e) {
      const int h = e / 128, j = (e / 32) % 4, l = e % 32;
      const int low = (ql[64 * h + 32 * (j % 2) + l] >> (4 * (j / 2))) & 15;
      const int high = (qh[32 * h + l] >> (2 * j)) & 3;
      const float dl = d * static_cast<float>(scales[e / 16]);
      dst[e] = dl * static_cast<float>((low | high << 4) - 32);
    }
  }
}

bool DequantizeBlocksRef(DType t, const uint8_t* src, float* dst, int64_t nblocks) {
  switch (t) {
    case DType::kQ5_0:
      DequantQ5_0Ref(src, dst, nblocks);
      return true;
    case DType::kQ5_1:
      DequantQ5_1Ref(src, dst, nblocks);
      return true;
    case DType::kIQ4_NL:
      DequantIQ4_NLRef(src, dst, nblocks);
      return true;
    case DType::kQ2_K:
      DequantQ2_KRef(src, dst, nblocks);
      return true;
    case DType::kQ3_K:
      DequantQ3_KRef(src, dst, nblocks);
      return true;
    case DType::kQ4_K:
      DequantQ4_KRef(src, dst, nblocks);
      return true;
    case DType::kQ5_K:
      DequantQ5_KRef(src, dst, nblocks);
      return true;
    case DType::kQ6_K:
      DequantQ6_KRef(src, dst, nblocks);
      return true;
    case DType::kIQ2_XXS:
      DequantIQ2_XXSRef(src, dst, nblocks);
      return true;
    case DType::kIQ3_XXS:
      DequantIQ3_XXSRef(src, dst, nblocks);
      return true;
    case DType::kIQ4_XS:
      DequantIQ4_XSRef(src, dst, nblocks);
      return true;
    case DType::kIQ2_XS:
      DequantIQ2_XSRef(src, dst, nblocks);
      return true;
    case DType::kIQ2_S:
      DequantIQ2_SRef(src, dst, nblocks);
      return true;
    case DType::kIQ3_S:
      DequantIQ3_SRef(src, dst, nblocks);
      return true;
    case DType::kIQ1_S:
      DequantIQ1_SRef(src, dst, nblocks);
      return true;
    case DType::kIQ1_M:
      DequantIQ1_MRef(src, dst, nblocks);
      return true;
    default:
      return false;
  }
}

}  // namespace dq::ggml
