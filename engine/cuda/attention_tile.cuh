// Device helpers shared by the attention kernels (attention_prefill.cu, attention_prefill_fp8.cu,
// attention_decode.cu): cp.async, the 128-byte-swizzled tile layout wgmma reads, slots in the
// paged cache, bf16 packing.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace dq::cuda::attn {

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16-byte async copy; src_bytes 0 fills zeros (rows past the sequence).
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n"); }
__device__ __forceinline__ void CpAsyncWaitAll() { asm volatile("cp.async.wait_group 0;\n"); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Byte offset of 16-byte chunk `ch` of row `r` in a tile of kRows rows stored as head_dim / 64
// column halves of [kRows][128 bytes], the chunk index XOR-swizzled by r % 8 (the wgmma 128-byte
// swizzle; each half starts 1024-aligned).
template <int kRows>
__device__ __forceinline__ uint32_t SwzOffset(int r, int ch) {
  return (ch >> 3) * (kRows * 128) + r * 128 + (((ch & 7) ^ (r & 7)) << 4);
}

// Flat cache slot of position `pos` through the block table; shift >= 0 when the block size is
// 1 << shift.
__device__ __forceinline__ int64_t SlotOf(const int32_t* table, int pos, int bs, int shift) {
  const int blk = shift >= 0 ? pos >> shift : pos / bs;
  return int64_t{table[blk]} * bs + (pos - blk * bs);
}

}  // namespace dq::cuda::attn
