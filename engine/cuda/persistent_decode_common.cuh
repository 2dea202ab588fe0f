// Device helpers shared by the persistent decode kernel's task families (persistent_decode.h):
// the counters' acquire / release, loads of data other CTAs wrote during the step, and the
// shared-memory plan of one CTA.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "engine/cuda/persistent_decode.h"

namespace dq::cuda::pd {

constexpr int kWarps = kPdThreads / 32;
// One job's partial sums of a 16-row tile: 32 lanes x 4 floats.
constexpr int kJobBytes = 512;

__host__ __device__ inline int64_t RoundUp128(int64_t n) { return (n + 127) / 128 * 128; }
__host__ __device__ inline int64_t MaxIn(const PersistentDecodeParams& p) {
  const int64_t q = int64_t{p.num_heads} * p.head_dim;
  return p.hidden > p.inter ? (p.hidden > q ? p.hidden : q) : (p.inter > q ? p.inter : q);
}
// Where the GEMV tasks' parts sit in dynamic shared memory: the staged input rows, the rings,
// the partial sums. Attention tasks use the same memory from offset 0.
__host__ __device__ inline int64_t XsBytes(const PersistentDecodeParams& p) {
  return RoundUp128(int64_t{p.rows} * MaxIn(p) * 2);
}
__host__ __device__ inline int64_t RingOffset(const PersistentDecodeParams& p) {
  return XsBytes(p);
}
__host__ __device__ inline int64_t RedOffset(const PersistentDecodeParams& p) {
  return XsBytes(p) + int64_t{kWarps} * p.ring_bytes;
}
__host__ __device__ inline int64_t AttnGroupBytes(int head_dim) {
  return 4 * 3 * 2 * 16 * int64_t{head_dim} * 2;  // 4 warps x 3 stages x (K, V) 16-key tiles
}

// Global loads that bypass L1: the step's activations are written by other SMs during the
// launch, so no line of them may be served from this SM's L1 (nor through the read-only path).
__device__ __forceinline__ float4 LdCgF4(const float* p) {
  float4 v;
  asm volatile("ld.global.cg.v4.f32 {%0,%1,%2,%3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ float LdCgF32(const float* p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 LdCgU4(const void* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t LdCgU32(const void* p) {
  uint32_t v;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ float LdCgBf16(const __nv_bfloat16* p) {
  unsigned short v;
  asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}

__device__ __forceinline__ unsigned LoadAcquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void AddRelease(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned long long GlobalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
// Thread 0 records one of a task's trace points (0 start, 1 ready, 2 end) when tracing.
__device__ __forceinline__ void TracePoint(const PersistentDecodeParams& p, const PdTask& t,
                                           int point) {
  if (p.trace != nullptr && threadIdx.x == 0) p.trace[3 * t.index + point] = GlobalTimerNs();
}

// Blocks the CTA until the task's stage counter reaches its target: thread 0 spins on an acquire
// load and the barrier hands what it acquired to the whole CTA (CUTLASS's GenericBarrier
// pattern; no extra fence on this critical path).
__device__ __forceinline__ void WaitTask(const PersistentDecodeParams& p, const PdTask& t) {
  if (t.wait_counter >= 0 && threadIdx.x == 0) {
    const unsigned* c = p.counters + t.wait_counter;
    while (LoadAcquire(c) < static_cast<unsigned>(t.wait_target)) {
    }
  }
  TracePoint(p, t, 1);
  __syncthreads();
}
// Counts the task as finished once every thread's writes are done: the barrier orders them
// before thread 0's release, which is cumulative at gpu scope.
__device__ __forceinline__ void SignalTask(const PersistentDecodeParams& p, const PdTask& t) {
  __syncthreads();
  if (threadIdx.x == 0) AddRelease(p.counters + t.signal_counter, 1);
  TracePoint(p, t, 2);
}

// Asks L2 for the first bytes of a task's weights (up to 256 KiB, 32 KiB per thread of warp 0)
// before the task waits, so HBM streams them while the stage before finishes.
__device__ __forceinline__ void PrefetchL2(const void* base, int64_t bytes) {
  constexpr int64_t kPiece = 32768;
  const int i = threadIdx.x;
  if (i >= 8 || i * kPiece >= bytes) return;
  int64_t n = bytes - i * kPiece;
  n = (n < kPiece ? n : kPiece) & ~int64_t{15};
  if (n <= 0) return;
  const char* a = static_cast<const char*>(base) + i * kPiece;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(static_cast<unsigned>(n))
               : "memory");
}

__device__ __forceinline__ uint32_t SmemAddr32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void CpAsyncCg16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void CpAsyncCa8(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void CpAsyncCommitGroup() { asm volatile("cp.async.commit_group;\n"); }
template <int N>
__device__ __forceinline__ void CpAsyncWaitGroup() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace dq::cuda::pd
