// RMSNorm on the fp32 residual stream, optionally fused with the residual add:
//   r = residual_in (+ delta)            (delta fp32 or bf16, optional)
//   residual_out = r                     (optional; may alias residual_in)
//   out = bf16(weight * (r / sqrt(mean(r^2) + eps)))
// The plain variant is the same call with no delta and no residual_out. Numerics follow
// cpu::RmsNorm (fp32 sum of squares, 1/sqrt, weight * (x * inv)).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dq::cuda {

struct RmsNormArgs {
  const float* residual_in = nullptr;         // [rows, n]
  const float* delta_f32 = nullptr;           // [rows, n] or null
  const __nv_bfloat16* delta_bf16 = nullptr;  // [rows, n] or null (at most one delta)
  float* residual_out = nullptr;              // [rows, n] or null; may equal residual_in
  const float* weight = nullptr;              // [n], fp32 on the device
  __nv_bfloat16* out = nullptr;               // [rows, n]
  int64_t rows = 0;
  int n = 0;
  float eps = 1e-6f;
};

// Preconditions (asserted): n % 4 == 0, at most one delta, 16-byte aligned rows.
void RmsNormForward(const RmsNormArgs& args, cudaStream_t stream);

}  // namespace dq::cuda
