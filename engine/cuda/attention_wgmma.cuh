// Hopper warpgroup MMA (wgmma) wrappers for the attention kernels: bf16 inputs, fp32
// accumulators, operands in shared memory as 128-byte-swizzled tiles (see SmemDesc).
#pragma once

#include <cstdint>

namespace dq::cuda::wgmma {

// Shared-memory matrix descriptor, 128-byte swizzle: start address, leading byte offset (the
// stride between 64-element blocks along M/N for N-major operands; unused for K-major), stride
// byte offset (between 8-row groups). The swizzle atom (8 rows x 128 bytes) must be 1024-aligned.
__device__ __forceinline__ uint64_t SmemDesc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFF) << 32) | (uint64_t{1} << 62);
}
__device__ __forceinline__ void Fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void Commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void Wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Makes this thread's generic-proxy shared-memory writes (st.shared, cp.async) visible to the
// async proxy (wgmma operand reads); the barrier that follows publishes them to the block.
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving accumulator accesses across wgmma issue/wait.
template <int R>
__device__ __forceinline__ void FenceRegs(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The accumulator operands of an m64nN wgmma with fp32 D: N / 2 registers per thread, written
// once here (the operand list, and the "{%0, ...}" they take in the instruction text).
#define DQ_WGMMA_D32                                                                             \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%" \
  "25,%26,%27,%28,%29,%30,%31}"
#define DQ_WGMMA_D64                                                                             \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%" \
  "25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%" \
  "48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define DQ_WGMMA_OUT32(d)                                                                         \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define DQ_WGMMA_OUT64(d)                                                                          \
  DQ_WGMMA_OUT32(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), \
      "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]),   \
      "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]),   \
      "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]),   \
      "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// D[64 x 64] (+)= A[64 x 16] * B[16 x 64], A and B from shared memory, both K-major.
__device__ __forceinline__ void WgmmaSS_N64(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                            int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " DQ_WGMMA_D32
      ", %32, %33, p, 1, 1, 0, 0;\n}\n"
      : DQ_WGMMA_OUT32(d)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// D[64 x 128] (+)= A[64 x 16] * B[16 x 128], A and B from shared memory, both K-major.
__device__ __forceinline__ void WgmmaSS_N128(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                             int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " DQ_WGMMA_D64
      ", %64, %65, p, 1, 1, 0, 0;\n}\n"
      : DQ_WGMMA_OUT64(d)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// D[64 x 64] += A[64 x 16] * B[16 x 64], A from registers (the m16n8k16 A layout per warp),
// B from shared memory N-major (transposed).
__device__ __forceinline__ void WgmmaRS_N64(float (&d)[32], const uint32_t (&a)[4],
                                            uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " DQ_WGMMA_D32
      ", {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
      : DQ_WGMMA_OUT32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

// D[64 x 128] += A[64 x 16] * B[16 x 128], A from registers (the m16n8k16 A layout per warp),
// B from shared memory N-major (transposed).
__device__ __forceinline__ void WgmmaRS_N128(float (&d)[64], const uint32_t (&a)[4],
                                             uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " DQ_WGMMA_D64
      ", {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
      : DQ_WGMMA_OUT64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

// The one place a tile width becomes the instruction: D[64 x kN] (+)= A * B, both from shared
// memory.
template <int kN>
__device__ __forceinline__ void WgmmaSS(float (&d)[kN / 2], uint64_t a, uint64_t b, int acc) {
  static_assert(kN == 64 || kN == 128, "wgmma tiles are 64 or 128 wide here");
  if constexpr (kN == 64) {
    WgmmaSS_N64(d, a, b, acc);
  } else {
    WgmmaSS_N128(d, a, b, acc);
  }
}
// ... and D[64 x kN] += A (registers) * B (shared memory, N-major).
template <int kN>
__device__ __forceinline__ void WgmmaRS(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t b) {
  static_assert(kN == 64 || kN == 128, "wgmma tiles are 64 or 128 wide here");
  if constexpr (kN == 64) {
    WgmmaRS_N64(d, a, b);
  } else {
    WgmmaRS_N128(d, a, b);
  }
}

// FP8 (e4m3) inputs, fp32 accumulators, k = 32 per instruction. FP8 wgmma takes both operands
// K-major only (no transpose), so P V needs V stored transposed (attention_prefill_fp8.cu).
// D[64 x 128] (+)= A[64 x 32] * B[32 x 128], A and B from shared memory.
__device__ __forceinline__ void WgmmaSS_N128_E4M3(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                  int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " DQ_WGMMA_D64
      ", %64, %65, p, 1, 1;\n}\n"
      : DQ_WGMMA_OUT64(d)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
// D[64 x 128] += A[64 x 32] * B[32 x 128], A from registers: per warp 16 rows, thread (g, t) of
// the warp holding rows g and g + 8, k columns 4t..4t+3 and 16+4t..16+4t+3, four per register
// (a0: row g, a1: row g+8, a2: row g cols +16, a3: row g+8 cols +16).
__device__ __forceinline__ void WgmmaRS_N128_E4M3(float (&d)[64], const uint32_t (&a)[4],
                                                  uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " DQ_WGMMA_D64
      ", {%64,%65,%66,%67}, %68, p, 1, 1;\n}\n"
      : DQ_WGMMA_OUT64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

}  // namespace dq::cuda::wgmma

#undef DQ_WGMMA_D32
#undef DQ_WGMMA_D64
#undef DQ_WGMMA_OUT32
#undef DQ_WGMMA_OUT64
