// 8-bit activation blocks for the CPU's fast decode path (issue 25), beside the fp32 reference
// that defines every format's numerics. As llama.cpp does, a matrix's input is quantized once per
// row of activations into blocks of 32 (x ~ d * q, q in [-127, 127]), and each weight block's dot
// is an integer sum scaled once; the only difference from the reference is that 8-bit rounding
// of x. The weights' side is q8_packed.h (rows repacked at load for the vector units).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace dq::cpu {

// 32 activations: x[i] ~ d * q[i]; sum = sum(q) and s = d * sum (the term Q4_1's per-block
// minimum multiplies).
struct Q8Block {
  float d = 0.0f;
  float s = 0.0f;
  int32_t sum = 0;
  int8_t q[32] = {};
};

// Weight dtypes with an 8-bit-activation dot (GGUF Q4_1 and Q8_0).
bool HasQ8Dot(DType t);

// `n` values (a multiple of 32) into n / 32 blocks: d = amax / 127, q = x * (1 / d) rounded to
// the nearest integer, ties to even (the vector units' rounding; AVX2 where built for it).
void QuantizeQ8(const float* x, int64_t n, Q8Block* out);
// The same in plain C++ (the tests' reference for the vector code; the same bits).
void QuantizeQ8Scalar(const float* x, int64_t n, Q8Block* out);

// Row `row` (GGUF blocks of `t`, HasQ8Dot) times the quantized activations, `nblocks` blocks, in
// plain C++: per block acc = fma(isum, d_w * d_x, acc), then Q4_1's acc = fma(m_w, s_x, acc).
// The packed kernels (q8_packed.h) compute exactly this, so it is their bitwise reference.
float DotQ8Scalar(DType t, const uint8_t* row, const Q8Block* x, int64_t nblocks);

}  // namespace dq::cpu
