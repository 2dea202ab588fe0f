#include "engine/cpu/q8_packed.h"

#include <cmath>
#include <cstring>

#include "engine/model/linear_weight.h"
#include "engine/quant/ggml_simd.h"

namespace dq::cpu {
namespace {

constexpr int kG = kQ8PackRows;

// Row r's GGUF block (`t`) into block chunk `dst` of its group, at lane `lane`.
void PackBlock(DType t, const uint8_t* src, int lane, uint8_t* dst) {
  if (t == DType::kQ4_1) {
    for (int v = 0; v < 4; ++v) std::memcpy(dst + v * 64 + lane * 4, src + 4 + 4 * v, 4);
    std::memcpy(dst + 256 + lane * 2, src, 2);      // d
    std::memcpy(dst + 288 + lane * 2, src + 2, 2);  // m
    return;
  }
  for (int v = 0; v < 8; ++v) {
    for (int i = 0; i < 4; ++i) dst[v * 64 + lane * 4 + i] = src[2 + 4 * v + i] ^ 0x80;
  }
  std::memcpy(dst + 512 + lane * 2, src, 2);
}

// The scalar kernel over one packed group: DotQ8Scalar's operations, lane by lane.
void DotQ8GroupScalar(const Q8Packed& p, const uint8_t* group, const Q8Block* x, float* out) {
  const int64_t bb = p.block_bytes();
  for (int r = 0; r < kG; ++r) {
    float acc = 0.0f;
    for (int64_t b = 0; b < p.nblocks; ++b) {
      const uint8_t* blk = group + b * bb;
      const int8_t* q = x[b].q;
      int sum = 0;
      if (p.dtype == DType::kQ4_1) {
        for (int v = 0; v < 4; ++v) {
          for (int i = 0; i < 4; ++i) {
            const uint8_t byte = blk[v * 64 + r * 4 + i];
            sum += (byte & 15) * q[4 * v + i] + (byte >> 4) * q[16 + 4 * v + i];
          }
        }
        acc = std::fma(static_cast<float>(sum), ggml::LoadF16(blk + 256 + 2 * r) * x[b].d, acc);
        acc = std::fma(ggml::LoadF16(blk + 288 + 2 * r), x[b].s, acc);
      } else {
        for (int j = 0; j < 32; ++j) {
          sum += (static_cast<int>(blk[(j / 4) * 64 + r * 4 + j % 4]) - 128) * q[j];
        }
        acc = std::fma(static_cast<float>(sum), ggml::LoadF16(blk + 512 + 2 * r) * x[b].d, acc);
      }
    }
    out[r] = acc;
  }
}

#if defined(__x86_64__)
#define DQ_CPU_HAS(feature) (__builtin_cpu_init(), __builtin_cpu_supports(feature))
#else
#define DQ_CPU_HAS(feature) false
#endif

Q8Isa BestIsa() {
  static const Q8Isa best = [] {  // fixed for the process
    if (DQ_CPU_HAS("avx512vnni") && DQ_CPU_HAS("avx512bw") && DQ_CPU_HAS("avx512vl")) {
      return Q8Isa::kAvx512Vnni;
    }
    if (DQ_CPU_HAS("avxvnni")) return Q8Isa::kAvxVnni;
#if defined(__AVX2__)
    return Q8Isa::kAvx2;
#else
    return Q8Isa::kScalar;
#endif
  }();
  return best;
}

}  // namespace

std::shared_ptr<const Q8Packed> PackQ8(DType t, const uint8_t* rows, int64_t row_bytes, int64_t out,
                                       int64_t in) {
  auto p = std::make_shared<Q8Packed>();
  p->dtype = t;
  p->out_features = out;
  p->nblocks = in / 32;
  const int64_t bb = p->block_bytes(), src_bytes = bb / kG;
  p->bytes.assign(p->groups() * p->nblocks * bb, 0);
  for (int64_t r = 0; r < out; ++r) {
    uint8_t* group = p->bytes.data() + (r / kG) * p->nblocks * bb;
    for (int64_t b = 0; b < p->nblocks; ++b) {
      PackBlock(t, rows + r * row_bytes + b * src_bytes, static_cast<int>(r % kG), group + b * bb);
    }
  }
  return p;
}

void PackLinearForQ8(LinearWeight& w) {
  if (w.codec != nullptr || !HasQ8Dot(w.dtype) || w.in_features % 32 != 0 || w.q8_packed) return;
  w.q8_packed = PackQ8(w.dtype, w.data, w.row_bytes, w.out_features, w.in_features);
}

bool Q8IsaAvailable(Q8Isa isa) {
  switch (isa) {
    case Q8Isa::kBest:
    case Q8Isa::kScalar:
      return true;
    case Q8Isa::kAvx2:
#if defined(__AVX2__)
      return true;
#else
      return false;
#endif
    case Q8Isa::kAvxVnni:
      return BestIsa() == Q8Isa::kAvxVnni || DQ_CPU_HAS("avxvnni");
    case Q8Isa::kAvx512Vnni:
      return BestIsa() == Q8Isa::kAvx512Vnni;
  }
  return false;
}

const char* Q8IsaName(Q8Isa isa) {
  switch (isa) {
    case Q8Isa::kBest:
      return Q8IsaName(BestIsa());
    case Q8Isa::kScalar:
      return "scalar";
    case Q8Isa::kAvx2:
      return "avx2";
    case Q8Isa::kAvxVnni:
      return "avx-vnni";
    case Q8Isa::kAvx512Vnni:
      return "avx512-vnni";
  }
  return "?";
}

void DotQ8Packed(const Q8Packed& p, int64_t first, int64_t count, const Q8Block* x, float* out,
                 Q8Isa isa) {
  if (isa == Q8Isa::kBest) isa = BestIsa();
  auto kernel = DotQ8GroupScalar;
#if defined(__AVX2__)
  if (isa == Q8Isa::kAvx2) kernel = DotQ8GroupAvx2;
  if (isa == Q8Isa::kAvxVnni) kernel = DotQ8GroupAvxVnni;
  if (isa == Q8Isa::kAvx512Vnni) kernel = DotQ8GroupAvx512;
#endif
  for (int64_t g = 0; g < count; ++g) kernel(p, p.group(first + g), x, out + g * kG);
}

}  // namespace dq::cpu
