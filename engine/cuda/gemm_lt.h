// cuBLASLt GEMMs for the linear layers, in the layout they all share: activations X [m, k] and
// weights W [n, k], both row-major, give Y [m, n] = alpha * X · Wᵀ (row-major), optionally
// scaled per output channel (n) and per token (m), written as bf16 or accumulated into fp32.
// In cuBLASLt's column-major terms this is D[n, m] = Wᵀᵀ · X = op_T(W) · op_N(X): the "TN"
// layout FP8 requires on Hopper.
//
// Plans (descriptors, layouts, the heuristic's algorithm) are cached per shape, types and
// pointer alignment; the workspace is allocated once in the constructor, so Run() never
// allocates and is safe inside CUDA graph capture (after a first call for that plan outside it:
// the heuristic query is host-only, but keep it out of timed regions).
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "engine/cuda/device_buffer.h"

namespace dq::cuda {

// kE2M1: packed FP4 operands with UE4M3 block scales per 16 along k (NVFP4; Blackwell's
// block-scaled tensor cores, CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3). cuBLASLt has no such
// kernel before compute capability 10.0: Supported() says so.
enum class GemmInput { kBf16, kE4M3, kE2M1 };

struct GemmArgs {
  GemmInput input = GemmInput::kBf16;
  int64_t m = 0;            // tokens
  int64_t n = 0;            // output features
  int64_t k = 0;            // input features
  const void* x = nullptr;  // [m, k]
  const void* w = nullptr;  // [n, k]
  float alpha = 1.0f;
  // Outer-vector scales (kE4M3 only): y[i, j] = alpha * x_scale[i] * w_scale[j] * sum_k(...).
  // Both set or both null.
  const float* x_scale = nullptr;  // [m]
  const float* w_scale = nullptr;  // [n]
  // Block scales (kE2M1 only, both required): UE4M3 in cuBLASLt's tiled layout
  // (engine/quant/nvfp4_scale_layout.h), [m, k / 16] for x and [n, k / 16] for w. x and w are
  // then packed E2M1 [m, k / 2] and [n, k / 2]. y = alpha * sum_k(x * sx * w * sw).
  const uint8_t* x_block_scale = nullptr;
  const uint8_t* w_block_scale = nullptr;
  // Exactly one output: bf16 overwritten, or fp32 accumulated into (accumulate = true: y += ...;
  // false: y = ...).
  __nv_bfloat16* y_bf16 = nullptr;
  float* y_f32 = nullptr;
  bool accumulate = false;
};

class GemmLt {
 public:
  static constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt's recommendation on Hopper

  GemmLt();
  ~GemmLt();
  GemmLt(const GemmLt&) = delete;
  GemmLt& operator=(const GemmLt&) = delete;

  // Whether cuBLASLt has an algorithm for `args` (its shape, types, scale mode and alignment).
  // Caches the answer.
  bool Supported(const GemmArgs& args);
  // Runs the GEMM on `stream`; aborts (a bug, not an input error) when !Supported(args).
  void Run(const GemmArgs& args, cudaStream_t stream);

 private:
  struct Plan;
  // input, out type (0 bf16, 1 f32), accumulate, outer-vec scales, m, n, k, alignment code.
  using Key = std::tuple<int, int, int, int, int64_t, int64_t, int64_t, int>;
  Plan& GetPlan(const GemmArgs& args);

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace dq::cuda
