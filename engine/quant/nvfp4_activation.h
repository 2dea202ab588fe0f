// The nvfp4 w4a4 activation quantizer's result in stored form, for GEMMs that take FP4 operands
// directly (Blackwell's block-scaled tensor cores): the same numerics as the codec's
// QuantizeActivations (nvfp4_codec.cpp, which defines it), returned as codes instead of the
// dequantized row.
#pragma once

#include <cstdint>

namespace dq {

// Quantizes one activation row x[0..n) (n % 16 == 0) under global scale G_a
// (act_global_scale when > 0, else derived from the row's finite amax as QuantizeActivations
// does). Writes packed [n / 2] E2M1 nibbles (element 2j in the low nibble, the weights' packing)
// and scales [n / 16] UE4M3 block scales, and returns G_a. For every non-NaN x[i],
// E2M1ToFloat(code_i) * (E4M3ToFloat(scale_b) / G_a) is bit for bit QuantizeActivations' value
// (its expression). NaN, which QuantizeActivations keeps, has no E2M1 code: it is stored as +0.
float PackNvfp4ActivationRow(const float* x, int64_t n, float act_global_scale, uint8_t* packed,
                             uint8_t* scales);

}  // namespace dq
