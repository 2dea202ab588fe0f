// Small kernels around the linear layers' GEMMs: unpacking NVFP4 weights to bf16 for Hopper's
// tensor cores (which have no FP4 input), and the scale epilogue that applies per-token and
// per-channel factors to an fp32 GEMM result where cuBLASLt cannot.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dq::cuda {

// packed: [rows, cols / 2] E2M1 pairs (element 2j in the low nibble), scales: [rows, cols / 16]
// E4M3 block scales. Writes out [rows, cols] bf16 = E2M1 * block scale, exactly (the global
// scale is left to the GEMM's alpha). cols % 16 == 0.
void UnpackNvfp4ToBf16(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                       __nv_bfloat16* out, cudaStream_t stream);
// The same with the block scales in cuBLASLt's tiled layout (engine/quant/nvfp4_scale_layout.h),
// as the FP4 GEMM path stores them: runs that path's operands on GPUs without FP4 tensor cores.
void UnpackNvfp4TiledToBf16(const uint8_t* packed, const uint8_t* tiled_scales, int64_t rows,
                            int64_t cols, __nv_bfloat16* out, cudaStream_t stream);

// y[i, j] (op)= acc[i, j] * row_scale[i] * col_scale[j] * alpha over [rows, cols], where a null
// scale vector counts as ones. Exactly one of y_bf16 (overwritten) and y_accumulate (+=).
struct ScaleEpilogueArgs {
  const float* acc = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  const float* row_scale = nullptr;
  const float* col_scale = nullptr;
  float alpha = 1.0f;
  __nv_bfloat16* y_bf16 = nullptr;
  float* y_accumulate = nullptr;
};
void ScaleEpilogue(const ScaleEpilogueArgs& args, cudaStream_t stream);

}  // namespace dq::cuda
