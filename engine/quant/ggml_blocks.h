// Bit-exact ggml block dequantization and fused fp32 dot products over quantized rows.
//
// Block layouts (little-endian, packed, 32 values per block, as in ggml/GGUF):
//   Q4_0 (18 bytes): fp16 d; 16 bytes qs. Byte j holds element j in its low nibble and element
//                    j + 16 in its high nibble. x = (q - 8) * d.
//   Q4_1 (20 bytes): fp16 d; fp16 m; 16 bytes qs (nibbles as Q4_0). x = q * d + m, with the
//                    product rounded to fp32 before adding m (no FMA), as ggml and gguf-py do.
//   Q8_0 (34 bytes): fp16 d; 32 int8 qs. x = q * d.
// Q5_0, Q5_1, IQ4_NL and the 256-value k-quant / i-quant types (Q2_K .. Q6_K, IQ2_XXS,
// IQ3_XXS) are documented in engine/quant/ggml_kquants.h.
// Scalar types: F32 (4 bytes), F16 (IEEE half), BF16 (top half of an fp32).
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace dq {

// Writes the `n` fp32 values stored at `src` (a row of type `t`) to `dst`. `n` must be a
// multiple of DTypeBlockElems(t). The results are bit-identical to ggml's dequantize_row_*.
// kI32 values are converted to float.
void DequantizeRow(DType t, const uint8_t* src, float* dst, int64_t n);

// Returns sum_i dequant(row)[i] * x[i], accumulated in fp32 (decode-time matvec kernel).
// `n` must be a multiple of DTypeBlockElems(t); `row` and `x` need no particular alignment.
// Agrees with DequantizeRow followed by a scalar dot to ~1e-5 of sum_i |w_i * x_i|.
float DotRow(DType t, const uint8_t* row, const float* x, int64_t n);

// out[r] = DotRow(t, rows + r * row_bytes, x, n) for r in [0, nrows), bit-identical to DotRow
// (the same per-row summation order), but sharing each x load across several rows.
void DotRows(DType t, const uint8_t* rows, int64_t row_bytes, int nrows, const float* x, int64_t n,
             float* out);

}  // namespace dq
