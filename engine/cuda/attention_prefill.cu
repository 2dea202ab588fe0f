#include <cassert>
#include <cmath>

#include "engine/cuda/attention_prefill.h"
#include "engine/cuda/attention_tile.cuh"
#include "engine/cuda/attention_wgmma.cuh"
#include "engine/cuda/cuda_check.h"

namespace dq::cuda {
namespace {

using attn::CpAsync16;
using attn::CpAsyncCommit;
using attn::CpAsyncWaitAll;
using attn::kLog2e;
using attn::PackBf16;
using attn::SlotOf;
using attn::SmemAddr;
using attn::SwzOffset;

// ---- Hopper path: wgmma (warpgroup MMA) with Q, K and V as 128-byte-swizzled shared tiles ----
// Block = 2 warpgroups x 64 query rows; key tiles of kBlockN double-buffered through cp.async (the
// load of tile j + 1 overlaps the math on tile j). S = Q K^T reads both operands from shared
// memory; O += P V takes P from registers (the S accumulators rounded to bf16 in place) and V as
// an N-major (transposed) operand, so no tile is ever transposed or copied through registers.
constexpr int kWgBlockM = 128;
constexpr int kWgThreads = 256;

template <int kHeadDim, int kBlockN>
__device__ __forceinline__ void LoadKvTileSwz(uint32_t k_dst, uint32_t v_dst, const KvCacheLayer& c,
                                              const int32_t* table, int kvh, int kt, int ctx,
                                              int shift) {
  constexpr int kChunks = kHeadDim / 8, kRowsPerPass = kWgThreads / kChunks;
  const int ch = threadIdx.x % kChunks, r0 = threadIdx.x / kChunks;
  const int64_t stride = c.token_stride();
#pragma unroll
  for (int i = 0; i < kBlockN / kRowsPerPass; ++i) {
    const int r = r0 + i * kRowsPerPass, pos = kt * kBlockN + r;
    const bool valid = pos < ctx;
    const int64_t off =
        SlotOf(table, valid ? pos : 0, c.block_size, shift) * stride + kvh * kHeadDim + ch * 8;
    const uint32_t so = SwzOffset<kBlockN>(r, ch);
    CpAsync16(k_dst + so, c.k + off, valid);
    CpAsync16(v_dst + so, c.v + off, valid);
  }
}

using wgmma::WgmmaRS;
using wgmma::WgmmaSS;

template <int kHeadDim, int kBlockN>
constexpr int WgSmemBytes() {
  return 1024 + (kWgBlockM + 4 * kBlockN) * kHeadDim * 2;  // Q + 2 stages of K and V + alignment
}

template <int kHeadDim, int kBlockN, int kMinBlocks>
__global__ void __launch_bounds__(kWgThreads, kMinBlocks)
    PrefillWgmmaKernel(PrefillAttentionArgs a, KvCacheLayer c) {
  constexpr int kChunks = kHeadDim / 8, kQRowsPerPass = kWgThreads / kChunks;
  constexpr int kKvBytes = kBlockN * kHeadDim * 2;
  constexpr int kSAcc = kBlockN / 2, kOAcc = kHeadDim / 2;
  extern __shared__ unsigned char smem_raw[];
  const int seq = blockIdx.z, h = blockIdx.y;
  const int tile = gridDim.x - 1 - blockIdx.x;  // longest (latest) tiles first
  const int q_begin = a.cu_seqlens[seq], new_len = a.cu_seqlens[seq + 1] - q_begin;
  const int m0 = tile * kWgBlockM;
  if (m0 >= new_len) return;
  const int prefix = a.prefix_lens[seq];
  const int rows = min(kWgBlockM, new_len - m0);
  const int n_keys = prefix + m0 + rows;  // the last row's position + 1
  const int n_tiles = (n_keys + kBlockN - 1) / kBlockN;
  const int kvh = h / (a.num_heads / c.num_kv_heads);
  const int32_t* table = a.block_tables + int64_t{seq} * a.max_blocks_per_seq;
  const int shift = (c.block_size & (c.block_size - 1)) == 0 ? __ffs(c.block_size) - 1 : -1;
  const uint32_t q_s = (SmemAddr(smem_raw) + 1023) & ~1023u;
  const uint32_t kv_s = q_s + kWgBlockM * kHeadDim * 2;  // stage s: K at +2s*kKvBytes, V after
  {
    const int ch = threadIdx.x % kChunks, r0 = threadIdx.x / kChunks;
#pragma unroll
    for (int i = 0; i < kWgBlockM / kQRowsPerPass; ++i) {
      const int r = r0 + i * kQRowsPerPass;
      const bool valid = r < rows;
      const __nv_bfloat16* src =
          a.q + int64_t{q_begin + m0 + (valid ? r : 0)} * a.q_stride + h * kHeadDim + ch * 8;
      CpAsync16(q_s + SwzOffset<kWgBlockM>(r, ch), src, valid);
    }
  }
  LoadKvTileSwz<kHeadDim, kBlockN>(kv_s, kv_s + kKvBytes, c, table, kvh, 0, n_keys, shift);
  CpAsyncCommit();

  const int wg = threadIdx.x >> 7, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int wrow = wg * 64 + (warp & 3) * 16;  // this warp's first row in the block
  const int pos0 = prefix + m0 + wrow + g;     // positions of this thread's rows: +0, +8
  const uint32_t q_wg = q_s + wg * 64 * 128;
  float o[kOAcc];
#pragma unroll
  for (int i = 0; i < kOAcc; ++i) o[i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  const float scale_log2 = a.scale * kLog2e;

  for (int j = 0; j < n_tiles; ++j) {
    const uint32_t k_s = kv_s + (j & 1) * 2 * kKvBytes, v_s = k_s + kKvBytes;
    CpAsyncWaitAll();  // tile j (and Q) landed in this thread's chunks
    wgmma::FenceProxyAsync();
    __syncthreads();  // ... in everyone's; and every warp is done with tile j - 1's stage
    if (j + 1 < n_tiles) {
      const uint32_t nk = kv_s + ((j + 1) & 1) * 2 * kKvBytes;
      LoadKvTileSwz<kHeadDim, kBlockN>(nk, nk + kKvBytes, c, table, kvh, j + 1, n_keys, shift);
    }
    CpAsyncCommit();

    float s[kSAcc];
    // Ping-pong: warpgroup 1 issues its S = Q K^T only after warpgroup 0 has, so the tensor cores
    // run warpgroup 1's GEMM while warpgroup 0 does its softmax, and 0's P V while 1 does its.
    if (wg == 1) asm volatile("bar.sync 1, 256;\n" ::: "memory");
    wgmma::FenceRegs(s);
    wgmma::Fence();
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      const uint32_t koff = (kk & 3) * 32;  // 16 columns = 32 bytes into the row
      const uint64_t da = wgmma::SmemDesc(q_wg + (kk >> 2) * (kWgBlockM * 128) + koff, 16, 1024);
      const uint64_t db = wgmma::SmemDesc(k_s + (kk >> 2) * (kBlockN * 128) + koff, 16, 1024);
      WgmmaSS<kBlockN>(s, da, db, kk > 0 ? 1 : 0);
    }
    wgmma::Commit();
    if (wg == 0) asm volatile("bar.arrive 1, 256;\n" ::: "memory");
    wgmma::Wait<0>();
    wgmma::FenceRegs(s);

    // Causal mask, only where the tile reaches past this warp's first row (also masks keys past
    // the context: they are past every real row).
    const bool needs_mask = (j + 1) * kBlockN - 1 > prefix + m0 + wrow;
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < kSAcc; ++i) {
      const int e = i & 3, key = j * kBlockN + (i >> 2) * 8 + 2 * t + (e & 1);
      float v = s[i] * scale_log2;
      if (needs_mask && key > pos0 + (e >> 1) * 8) v = -INFINITY;
      s[i] = v;
      tile_max[e >> 1] = fmaxf(tile_max[e >> 1], v);
    }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float m_new = fmaxf(row_max[r], tile_max[r]);  // finite: tile 0 holds key 0
      alpha[r] = exp2f(row_max[r] - m_new);
      row_max[r] = m_new;
      row_sum[r] *= alpha[r];
    }
    uint32_t pf[kBlockN / 16][4];
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
      const float p0 = exp2f(s[nt * 4] - row_max[0]), p1 = exp2f(s[nt * 4 + 1] - row_max[0]);
      const float p2 = exp2f(s[nt * 4 + 2] - row_max[1]), p3 = exp2f(s[nt * 4 + 3] - row_max[1]);
      row_sum[0] += p0 + p1;
      row_sum[1] += p2 + p3;
      pf[nt / 2][(nt & 1) * 2] = PackBf16(p0, p1);
      pf[nt / 2][(nt & 1) * 2 + 1] = PackBf16(p2, p3);
    }
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; ++dt) {
      o[dt * 4] *= alpha[0], o[dt * 4 + 1] *= alpha[0];
      o[dt * 4 + 2] *= alpha[1], o[dt * 4 + 3] *= alpha[1];
    }
    wgmma::FenceRegs(o);
    wgmma::Fence();
#pragma unroll
    for (int ks = 0; ks < kBlockN / 16; ++ks) {
      // V as B[keys][dims], N-major: 8-key groups 1024 bytes apart, 64-dim halves a tile apart.
      WgmmaRS<kHeadDim>(o, pf[ks], wgmma::SmemDesc(v_s + ks * 16 * 128, kBlockN * 128, 1024));
    }
    wgmma::Commit();
    wgmma::Wait<0>();
    wgmma::FenceRegs(o);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    row_sum[r] = 1.0f / row_sum[r];
  }
  const int64_t out_stride = int64_t{a.num_heads} * kHeadDim;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = wrow + g + r * 8;
    if (row >= rows) continue;
    __nv_bfloat16* dst = a.out + int64_t{q_begin + m0 + row} * out_stride + h * kHeadDim + 2 * t;
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; ++dt) {
      *reinterpret_cast<__nv_bfloat162*>(dst + dt * 8) =
          __floats2bfloat162_rn(o[dt * 4 + 2 * r] * row_sum[r], o[dt * 4 + 2 * r + 1] * row_sum[r]);
    }
  }
}

template <int kHeadDim, int kBlockN, int kMinBlocks>
void LaunchWgmma(const PrefillAttentionArgs& a, const KvCacheLayer& c, cudaStream_t stream) {
  constexpr int kSmem = WgSmemBytes<kHeadDim, kBlockN>();
  auto kernel = PrefillWgmmaKernel<kHeadDim, kBlockN, kMinBlocks>;
  // Not a stream operation, so it is allowed during graph capture.
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid((a.max_q_len + kWgBlockM - 1) / kWgBlockM, a.num_heads, a.num_seqs);
  kernel<<<grid, kWgThreads, kSmem, stream>>>(a, c);
  CUDA_CHECK_LAUNCH();
}

// The kernel choice (PrefillAttentionArgs::variant) as template parameters: key tile width and
// the blocks per SM it leaves room for.
template <int kHeadDim>
void Launch(const PrefillAttentionArgs& a, const KvCacheLayer& c, cudaStream_t stream) {
  switch (a.variant) {
    case PrefillAttentionKernel::kWgmma128:
      return LaunchWgmma<kHeadDim, 128, 1>(a, c, stream);
    case PrefillAttentionKernel::kWgmma64:
      break;
  }
  return LaunchWgmma<kHeadDim, 64, 2>(a, c, stream);
}

}  // namespace

void PrefillAttentionForward(const PrefillAttentionArgs& args, const KvCacheLayer& cache,
                             cudaStream_t stream) {
  PrefillAttentionArgs a = args;
  if (a.q_stride == 0) a.q_stride = int64_t{a.num_heads} * cache.head_dim;
  if (a.scale == 0.0f) a.scale = 1.0f / std::sqrt(static_cast<float>(cache.head_dim));
  assert(a.q && a.out && a.cu_seqlens && a.prefix_lens && a.block_tables);
  assert(cache.num_kv_heads > 0 && a.num_heads % cache.num_kv_heads == 0);
  assert(a.q_stride % 8 == 0);
  if (a.num_seqs == 0 || a.max_q_len == 0) return;
  switch (
      cache.head_dim) {  // the one place head_dim (then the variant) becomes a template parameter
    case 64:
      return Launch<64>(a, cache, stream);
    case 128:
      return Launch<128>(a, cache, stream);
    default:
      assert(false && "PrefillAttentionForward: head_dim must be 64 or 128");
  }
}

}  // namespace dq::cuda
