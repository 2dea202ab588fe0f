// Element-wise ops between the GEMMs: the embedding gather into the fp32 residual stream,
// SwiGLU, and the residual add.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dq::cuda {

// out[t, :] = float(table[ids[t], :]). Ids must be in [0, vocab) (checked by the caller).
struct EmbeddingArgs {
  const __nv_bfloat16* table = nullptr;  // [vocab, hidden]
  const int32_t* ids = nullptr;          // [tokens]
  float* out = nullptr;                  // [tokens, hidden]
  int64_t tokens = 0;
  int hidden = 0;
};
void EmbeddingForward(const EmbeddingArgs& args, cudaStream_t stream);

// out[t, i] = bf16(silu(gate[t, i]) * up[t, i]), silu(g) = g / (1 + exp(-g)). For the fused
// [T, 2 I] gate|up layout pass gate = x, up = x + I, in_stride = 2 I.
struct SwiGluArgs {
  const __nv_bfloat16* gate = nullptr;
  const __nv_bfloat16* up = nullptr;
  int64_t in_stride = 0;         // elements between rows of gate and of up; 0: cols
  __nv_bfloat16* out = nullptr;  // [rows, cols] (row stride cols)
  int64_t rows = 0;
  int cols = 0;
};
void SwiGluForward(const SwiGluArgs& args, cudaStream_t stream);

// residual[i] += delta[i] over n values; delta is fp32 or bf16 (exactly one).
struct ResidualAddArgs {
  float* residual = nullptr;
  const float* delta_f32 = nullptr;
  const __nv_bfloat16* delta_bf16 = nullptr;
  int64_t n = 0;
};
void ResidualAddForward(const ResidualAddArgs& args, cudaStream_t stream);

}  // namespace dq::cuda
