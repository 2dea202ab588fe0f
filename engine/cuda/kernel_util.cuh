// Small device helpers shared by the op kernels (norm, rope, elementwise, sampling, attention).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <utility>

#include "engine/cuda/cuda_check.h"

namespace dq::cuda::detail {

// Programmatic dependent launch (PDL). A kernel launched with LaunchPdl may start while the
// previous kernel in the stream is still running; it must call PdlWait() before it reads
// anything that kernel wrote (griddepcontrol.wait returns once the previous grid has completed
// and its memory is visible; at once when the kernel was launched without PDL). PdlTrigger()
// lets the next kernel be launched early: every op kernel waits first and triggers right after,
// so a decode step's ~300 small launches overlap their launch latency with the previous kernel.
__device__ __forceinline__ void PdlWait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void PdlTrigger() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// The one environment switch of the kernels, a kill switch (docs/serving.md, "Kernel options"):
// with DQ_NO_PDL set (to anything) every launch is a plain one, without the PDL attribute. For
// per-kernel profiles without launch overlap (bench/results/gpu_profile_nopdl_h200.json) and to
// rule PDL out when a kernel misbehaves; results are the same. Read once per process.
inline bool PdlEnabled() {
  static const bool on = std::getenv("DQ_NO_PDL") == nullptr;
  return on;
}

// kernel<<<grid, block, smem, stream>>>(args...) with the PDL launch attribute.
template <typename... Params, typename... Args>
void LaunchPdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
               Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = PdlEnabled() ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// LaunchPdl with thread-block clusters of `cluster` CTAs along x (grid.x a multiple of it).
template <typename... Params, typename... Args>
void LaunchPdlCluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                      unsigned cluster, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = PdlEnabled() ? 2 : 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 floats; the call ends with the block synchronised.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpSum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int nwarps = blockDim.x >> 5;
  v = lane < nwarps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

// 8 bf16 in one 16-byte access.
struct alignas(16) Bf16x8 {
  __nv_bfloat162 h[4];
};

}  // namespace dq::cuda::detail
