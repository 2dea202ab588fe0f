// 8-bit activation blocks and integer dot products against GGUF weight blocks: the CPU's fast
// decode path (issue 25), beside the fp32 reference that defines every format's numerics. As
// llama.cpp does, a matrix's input is quantized once per row of activations into blocks of 32
// (x ~ d * q, q in [-127, 127]), and each weight block's dot is an integer sum (AVX2
// maddubs/madd) scaled once; the only difference from the reference is that 8-bit rounding of x.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace dq::cpu {

// 32 activations: x[i] ~ d * q[i]; s = d * sum(q) (the term Q4_1's per-block minimum multiplies).
struct Q8Block {
  float d = 0.0f;
  float s = 0.0f;
  int8_t q[32] = {};
};
static_assert(offsetof(Q8Block, s) == offsetof(Q8Block, d) + 4, "d and s load as one pair");

// Weight dtypes with an 8-bit-activation dot (GGUF Q4_1 and Q8_0).
bool HasQ8Dot(DType t);

// `n` values (a multiple of 32) into n / 32 blocks: d = amax / 127, q = round(x / d).
void QuantizeQ8(const float* x, int64_t n, Q8Block* out);

// Row `row` (GGUF blocks of `t`, HasQ8Dot) times the quantized activations, `nblocks` blocks.
float DotQ8(DType t, const uint8_t* row, const Q8Block* x, int64_t nblocks);
// Which vector kernels run: the best this CPU has (read once from CPUID), or one named (tests run
// each the machine has; a named one it lacks falls back to AVX2).
enum class Q8Isa { kBest, kAvx2, kAvxVnni };
bool CpuHasAvxVnni();

// out[r] = DotQ8(t, rows + r * row_bytes, x, nblocks) for r in [0, nrows), the same bits, with
// each x block loaded once for several rows.
void DotQ8Rows(DType t, const uint8_t* rows, int64_t row_bytes, int nrows, const Q8Block* x,
               int64_t nblocks, float* out, Q8Isa isa = Q8Isa::kBest);
// The same in plain C++ (the tests' reference for the vector code).
float DotQ8Scalar(DType t, const uint8_t* row, const Q8Block* x, int64_t nblocks);

}  // namespace dq::cpu
