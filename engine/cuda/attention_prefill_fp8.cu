#include <cuda_fp8.h>

#include <algorithm>
#include <cassert>
#include <cmath>

#include "engine/cuda/attention_prefill_fp8.h"
#include "engine/cuda/attention_tile.cuh"
#include "engine/cuda/attention_wgmma.cuh"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/mbarrier.cuh"

namespace dq::cuda {
namespace {

constexpr int kT = kFp8AttentionTile;
constexpr int kHd = 128;                            // head_dim: one 128-byte e4m3 row
constexpr int kTileBytes = kT * kHd;                // 16 KiB: a q, K or V^T tile
constexpr int kConsumerThreads = 256;               // two warpgroups of 64 query rows
constexpr int kThreads = kConsumerThreads + 128;    // + the producer warpgroup (one thread works)
constexpr int kSmem = 1024 + 5 * kTileBytes + 128;  // align, Q, 2 x (K, V^T), barriers
constexpr float kE4m3Max = 448.0f;
constexpr float kTiny = 1e-30f;
constexpr float kPBias = 8.0f;  // P is stored times 2^8: e4m3's subnormals start at 2^-9
using attn::kLog2e;
using attn::SlotOf;
using attn::SmemAddr;

// Byte offsets of the workspace's arrays, from the batch's totals.
struct Fp8Layout {
  size_t amax = 0, q8 = 0, qscale = 0, k8 = 0, vt8 = 0, end = 0;
};
size_t Align1k(size_t x) { return (x + 1023) & ~size_t{1023}; }
Fp8Layout LayoutFor(int q_tiles, int key_tiles, int seqs, int heads, int kv_heads) {
  Fp8Layout L;
  L.q8 = Align1k(size_t(seqs) * kv_heads * 2 * kHd * 4);  // amax: [seq][kvh][K, V][hd] u32
  L.qscale = Align1k(L.q8 + size_t(q_tiles) * heads * kTileBytes);
  L.k8 = Align1k(L.qscale + size_t(q_tiles) * heads * kT * 4);
  L.vt8 = L.k8 + size_t(key_tiles) * kv_heads * kTileBytes;
  L.end = L.vt8 + size_t(key_tiles) * kv_heads * kTileBytes;
  return L;
}

struct Fp8Params {
  PrefillAttentionArgs a;
  KvCacheLayer c;
  const int32_t* cu_q_tiles;
  const int32_t* cu_key_tiles;
  uint32_t* amax;  // float bits (non-negative, so they order as integers)
  uint8_t* q8;
  float* qscale;
  uint8_t* k8;
  uint8_t* vt8;
};

struct SeqInfo {
  int q_begin, new_len, prefix, ctx;
};
__device__ __forceinline__ SeqInfo Seq(const PrefillAttentionArgs& a, int s) {
  const int q_begin = a.cu_seqlens[s], new_len = a.cu_seqlens[s + 1] - q_begin;
  return {q_begin, new_len, a.prefix_lens[s], a.prefix_lens[s] + new_len};
}
__device__ __forceinline__ int BlockShift(int bs) {
  return (bs & (bs - 1)) == 0 ? __ffs(bs) - 1 : -1;
}
__device__ __forceinline__ float AmaxOf(const Fp8Params& p, int seq, int kvh, int which, int d) {
  const uint32_t bits = p.amax[((seq * p.c.num_kv_heads + kvh) * 2 + which) * kHd + d];
  return fmaxf(__uint_as_float(bits), kTiny);
}
__device__ __forceinline__ uint32_t PackE4m3(float a, float b, float c, float d) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// Swizzled byte offset of 16-byte chunk `ch` of row `r` in a [rows][128 B] tile.
__device__ __forceinline__ int Swz(int r, int ch) { return r * 128 + ((ch ^ (r & 7)) << 4); }
// The key a P register byte at logical k index l (of a 32-key chunk) holds: the S accumulators
// give thread t keys 2t, 2t+1, 8+2t, 9+2t (and +16), the e4m3 A operand wants k = 4t..4t+3.
__device__ __forceinline__ int PermutedKey(int l) {
  return (l & 16) + 2 * ((l >> 2) & 3) + (l & 1) + ((l & 2) ? 8 : 0);
}

// 1. amax of every K and V channel over a span of kAmaxKeys keys, merged into the sequence's.
// Half tiles (twice the blocks of whole ones; each block merges its span before the global
// atomics), loads unrolled so that several are in flight per thread.
constexpr int kAmaxKeys = 64;
__global__ void __launch_bounds__(256) KvAmaxKernel(Fp8Params p) {
  extern __shared__ uint32_t red[];  // [kvh][K, V][hd]
  const int seq = blockIdx.y, kvh_n = p.c.num_kv_heads;
  const SeqInfo si = Seq(p.a, seq);
  const int k0 = blockIdx.x * kAmaxKeys;
  if (k0 >= si.ctx) return;
  for (int i = threadIdx.x; i < kvh_n * 2 * kHd; i += blockDim.x) red[i] = 0;
  __syncthreads();
  const int chunks = kvh_n * (kHd / 8), cc = threadIdx.x % chunks, kvh = cc / (kHd / 8);
  const int d0 = (cc % (kHd / 8)) * 8, step = blockDim.x / chunks;
  const int nkeys = min(kAmaxKeys, si.ctx - k0), shift = BlockShift(p.c.block_size);
  const int32_t* table = p.a.block_tables + int64_t{seq} * p.a.max_blocks_per_seq;
  float km[8] = {}, vm[8] = {};
#pragma unroll 4
  for (int r = threadIdx.x / chunks; r < nkeys; r += step) {
    const int64_t off =
        SlotOf(table, k0 + r, p.c.block_size, shift) * p.c.token_stride() + kvh * kHd + d0;
    const uint4 kr = *reinterpret_cast<const uint4*>(p.c.k + off);
    const uint4 vr = *reinterpret_cast<const uint4*>(p.c.v + off);
    const __nv_bfloat16* kb = reinterpret_cast<const __nv_bfloat16*>(&kr);
    const __nv_bfloat16* vb = reinterpret_cast<const __nv_bfloat16*>(&vr);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      km[e] = fmaxf(km[e], fabsf(__bfloat162float(kb[e])));
      vm[e] = fmaxf(vm[e], fabsf(__bfloat162float(vb[e])));
    }
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    atomicMax(&red[(kvh * 2) * kHd + d0 + e], __float_as_uint(km[e]));
    atomicMax(&red[(kvh * 2 + 1) * kHd + d0 + e], __float_as_uint(vm[e]));
  }
  __syncthreads();
  uint32_t* dst = p.amax + int64_t{seq} * kvh_n * 2 * kHd;
  for (int i = threadIdx.x; i < kvh_n * 2 * kHd; i += blockDim.x) {
    if (red[i] != 0) atomicMax(&dst[i], red[i]);
  }
}

// 2. One key tile of one KV head: K as [key][hd] e4m3 and V^T as [hd][key] e4m3 (keys permuted
// within 32-key chunks, see PermutedKey), both swizzled; keys past the context are zeros.
__global__ void __launch_bounds__(256) QuantKvKernel(Fp8Params p) {
  __shared__ float inv_k[kHd], inv_v[kHd];
  __shared__ __align__(16) uint8_t vs[kT * kHd];  // V tile in e4m3, [key][hd]
  const int seq = blockIdx.y, kt = blockIdx.x, kvh = blockIdx.z, kvh_n = p.c.num_kv_heads;
  const SeqInfo si = Seq(p.a, seq);
  if (kt * kT >= si.ctx) return;
  if (threadIdx.x < kHd) {
    inv_k[threadIdx.x] = kE4m3Max / AmaxOf(p, seq, kvh, 0, threadIdx.x);
    inv_v[threadIdx.x] = kE4m3Max / AmaxOf(p, seq, kvh, 1, threadIdx.x);
  }
  __syncthreads();
  const int shift = BlockShift(p.c.block_size);
  const int32_t* table = p.a.block_tables + int64_t{seq} * p.a.max_blocks_per_seq;
  const int64_t tile = int64_t{p.cu_key_tiles[seq] + kt} * kvh_n + kvh;
  auto src = [&](const __nv_bfloat16* base, int key, int d) {
    return base + SlotOf(table, key, p.c.block_size, shift) * p.c.token_stride() + kvh * kHd + d;
  };
  for (int i = threadIdx.x; i < kT * 8; i += blockDim.x) {  // K: 16 channels per item
    const int r = i / 8, ch = i % 8, key = kt * kT + r;
    uint4 out = {0, 0, 0, 0};
    if (key < si.ctx) {
      const uint4* s = reinterpret_cast<const uint4*>(src(p.c.k, key, ch * 16));
      const uint4 raw[2] = {s[0], s[1]};
      const __nv_bfloat16* x = reinterpret_cast<const __nv_bfloat16*>(raw);
      uint32_t* o = &out.x;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float* sc = inv_k + ch * 16 + 4 * e;
        o[e] = PackE4m3(__bfloat162float(x[4 * e]) * sc[0], __bfloat162float(x[4 * e + 1]) * sc[1],
                        __bfloat162float(x[4 * e + 2]) * sc[2],
                        __bfloat162float(x[4 * e + 3]) * sc[3]);
      }
    }
    *reinterpret_cast<uint4*>(p.k8 + tile * kTileBytes + Swz(r, ch)) = out;
  }
  for (int i = threadIdx.x; i < kT * (kHd / 8); i += blockDim.x) {  // V into shared, 8 per item
    const int r = i / (kHd / 8), d = (i % (kHd / 8)) * 8, key = kt * kT + r;
    uint2 out = {0, 0};
    if (key < si.ctx) {
      const uint4 raw = *reinterpret_cast<const uint4*>(src(p.c.v, key, d));
      const __nv_bfloat16* x = reinterpret_cast<const __nv_bfloat16*>(&raw);
      const float* sc = inv_v + d;
      out.x = PackE4m3(__bfloat162float(x[0]) * sc[0], __bfloat162float(x[1]) * sc[1],
                       __bfloat162float(x[2]) * sc[2], __bfloat162float(x[3]) * sc[3]);
      out.y = PackE4m3(__bfloat162float(x[4]) * sc[4], __bfloat162float(x[5]) * sc[5],
                       __bfloat162float(x[6]) * sc[6], __bfloat162float(x[7]) * sc[7]);
    }
    *reinterpret_cast<uint2*>(vs + r * kHd + d) = out;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kHd * 8; i += blockDim.x) {  // V^T: 16 keys per item
    const int d = i % kHd, cc = i / kHd;
    uint32_t w[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      uint32_t word = 0;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int l = cc * 16 + 4 * e + b, key = (l & ~31) + PermutedKey(l & 31);
        word |= uint32_t{vs[key * kHd + d]} << (8 * b);
      }
      w[e] = word;
    }
    *reinterpret_cast<uint4*>(p.vt8 + tile * kTileBytes + Swz(d, cc)) =
        make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// 3. Q with K's channel scales folded in, one e4m3 scale per token and head; a warp per row.
__global__ void __launch_bounds__(128) QuantQKernel(Fp8Params p) {
  const int seq = blockIdx.y, mt = blockIdx.x, h = blockIdx.z;
  const SeqInfo si = Seq(p.a, seq);
  if (mt * kT >= si.new_len) return;
  const int kvh = h / (p.a.num_heads / p.c.num_kv_heads);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, d0 = lane * 4;
  float sk[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) sk[e] = AmaxOf(p, seq, kvh, 0, d0 + e) / kE4m3Max;
  const int64_t tile = int64_t{p.cu_q_tiles[seq] + mt} * p.a.num_heads + h;
  for (int r = warp; r < kT; r += 4) {
    const int row = mt * kT + r;
    float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (row < si.new_len) {
      const uint2 raw = *reinterpret_cast<const uint2*>(
          p.a.q + int64_t{si.q_begin + row} * p.a.q_stride + h * kHd + d0);
      const __nv_bfloat16* xb = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
      for (int e = 0; e < 4; ++e) x[e] = __bfloat162float(xb[e]) * sk[e];
    }
    float m = fmaxf(fmaxf(fabsf(x[0]), fabsf(x[1])), fmaxf(fabsf(x[2]), fabsf(x[3])));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float qs = fmaxf(m, kTiny) / kE4m3Max, inv = 1.0f / qs;
    *reinterpret_cast<uint32_t*>(p.q8 + tile * kTileBytes + Swz(r, lane >> 2) + (lane & 3) * 4) =
        PackE4m3(x[0] * inv, x[1] * inv, x[2] * inv, x[3] * inv);
    if (lane == 0) p.qscale[tile * kT + r] = qs;
  }
}

// ---- 4. attention ----

// Online softmax over one 128-key tile of S (the m64n128 accumulator layout: s[i] is row
// g + 8 * ((i >> 1) & 1), key 8 * (i >> 2) + 2t + (i & 1)), in raw Q.K units scaled by f per
// row. Writes P (times 2^8) as e4m3 A-operand registers and the rescale factor of the old rows.
struct RowState {
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, f[2];
};
__device__ __forceinline__ void Softmax(float (&s)[64], uint32_t (&pn)[4][4], RowState& st,
                                        float (&alpha)[2], bool mask, int key0, int pos0, int t) {
  // Row maxima as 8 independent chains per row, then a tree (one chain of 32 would leave
  // the FMNMX latency exposed).
  float part[2][8];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int c = 0; c < 8; ++c) part[r][c] = -INFINITY;
  }
  if (mask) {  // only the tiles that reach past a row's position pay for the mask
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      const int e = i & 3, key = key0 + (i >> 2) * 8 + 2 * t + (e & 1);
      if (key > pos0 + (e >> 1) * 8) s[i] = -INFINITY;
    }
  }
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    const int e = i & 3;
    float& m = part[e >> 1][((i >> 2) & 3) * 2 + (e & 1)];
    m = fmaxf(m, s[i]);
  }
  float tmax[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float a = fmaxf(fmaxf(part[r][0], part[r][1]), fmaxf(part[r][2], part[r][3]));
    const float b = fmaxf(fmaxf(part[r][4], part[r][5]), fmaxf(part[r][6], part[r][7]));
    tmax[r] = fmaxf(a, b);
  }
  float bias[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
    tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
    const float mn = fmaxf(st.m[r], tmax[r]);  // finite: tile 0 holds key 0
    alpha[r] = Exp2((st.m[r] - mn) * st.f[r]);
    st.m[r] = mn;
    bias[r] = kPBias - mn * st.f[r];
  }
#pragma unroll
  for (int c = 0; c < 4; ++c) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // register q: rows g / g+8 (q & 1), keys +0 / +16 (q >> 1)
      const int r = q & 1, i0 = (4 * c + 2 * (q >> 1)) * 4 + 2 * r, i1 = i0 + 4;
      const float p0 = Exp2(fmaf(s[i0], st.f[r], bias[r]));
      const float p1 = Exp2(fmaf(s[i0 + 1], st.f[r], bias[r]));
      const float p2 = Exp2(fmaf(s[i1], st.f[r], bias[r]));
      const float p3 = Exp2(fmaf(s[i1 + 1], st.f[r], bias[r]));
      sum[r] += (p0 + p1) + (p2 + p3);
      pn[c][q] = PackE4m3(p0, p1, p2, p3);
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) st.l[r] = st.l[r] * alpha[r] + sum[r];
}

// Shared memory from a 1024-aligned base: Q, K stages 0/1, V^T stages 0/1 (16 KiB each), then
// the barriers. Stage addresses are arithmetic (no arrays indexed at run time: local memory).
struct Ring {
  uint32_t base;
  __device__ uint32_t q() const { return base; }
  __device__ uint32_t k(int st) const { return base + (1 + st) * kTileBytes; }
  __device__ uint32_t v(int st) const { return base + (3 + st) * kTileBytes; }
  __device__ uint32_t q_full() const { return base + 5 * kTileBytes; }
  __device__ uint32_t k_full(int st) const { return q_full() + 8 + 8 * st; }
  __device__ uint32_t k_empty(int st) const { return q_full() + 24 + 8 * st; }
  __device__ uint32_t v_full(int st) const { return q_full() + 40 + 8 * st; }
  __device__ uint32_t v_empty(int st) const { return q_full() + 56 + 8 * st; }
};
__device__ __forceinline__ void Release(uint32_t bar, int lane) {
  __syncwarp();
  if (lane == 0) mbar::Arrive(bar);
}

__device__ __forceinline__ void Produce(const Fp8Params& p, const Ring& R, int seq, int h, int tile,
                                        int n_tiles) {
  const int kvh_n = p.c.num_kv_heads, kvh = h / (p.a.num_heads / kvh_n);
  mbar::ArriveExpectTx(R.q_full(), kTileBytes);
  mbar::BulkCopy(R.q(), p.q8 + (int64_t{p.cu_q_tiles[seq] + tile} * p.a.num_heads + h) * kTileBytes,
                 kTileBytes, R.q_full());
  const int64_t base = (int64_t{p.cu_key_tiles[seq]} * kvh_n + kvh) * kTileBytes;
  const int64_t step = int64_t{kvh_n} * kTileBytes;
  for (int j = 0; j < n_tiles; ++j) {
    const int st = j & 1;
    const uint32_t parity = ((j >> 1) & 1) ^ 1;
    mbar::Wait(R.k_empty(st), parity);
    mbar::ArriveExpectTx(R.k_full(st), kTileBytes);
    mbar::BulkCopy(R.k(st), p.k8 + base + j * step, kTileBytes, R.k_full(st));
    mbar::Wait(R.v_empty(st), parity);
    mbar::ArriveExpectTx(R.v_full(st), kTileBytes);
    mbar::BulkCopy(R.v(st), p.vt8 + base + j * step, kTileBytes, R.v_full(st));
  }
}

// Pins every value the next wgmma batch reads (accumulators, P registers) before its fence, so
// that ptxas need not serialize the batch.
__device__ __forceinline__ void FenceOperands(float (&s)[64], float (&o)[64],
                                              uint32_t (&pf)[4][4]) {
  wgmma::FenceRegs(s);
  wgmma::FenceRegs(o);
#pragma unroll
  for (int c = 0; c < 4; ++c) {
#pragma unroll
    for (int r = 0; r < 4; ++r) asm volatile("" : "+r"(pf[c][r])::"memory");
  }
  wgmma::Fence();
}
__device__ __forceinline__ void IssueQk(float (&s)[64], uint32_t q, uint32_t k) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    wgmma::WgmmaSS_N128_E4M3(s, wgmma::SmemDesc(q + kk * 32, 16, 1024),
                             wgmma::SmemDesc(k + kk * 32, 16, 1024), kk > 0 ? 1 : 0);
  }
  wgmma::Commit();
}
__device__ __forceinline__ void IssuePv(float (&o)[64], const uint32_t (&pf)[4][4], uint32_t v) {
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    wgmma::WgmmaRS_N128_E4M3(o, pf[c], wgmma::SmemDesc(v + c * 32, 16, 1024));
  }
  wgmma::Commit();
}

// The output rows of one thread: O / l per row, times V's channel scales, as bf16.
struct RowSlot {
  int seq, h, m0, row, t;  // row: the thread's first row in the q tile (the other is +8)
};
__device__ __forceinline__ void StoreRows(const Fp8Params& p, const float (&o)[64],
                                          const RowState& st, const RowSlot& at,
                                          const SeqInfo& si) {
  const int seq = at.seq, h = at.h, m0 = at.m0, t = at.t;
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = st.l[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv[r] = 1.0f / l;
  }
  const int kvh = h / (p.a.num_heads / p.c.num_kv_heads);
  const int64_t out_stride = int64_t{p.a.num_heads} * kHd;
  const int rows = min(kT, si.new_len - m0);
#pragma unroll
  for (int dt = 0; dt < kHd / 8; ++dt) {
    const int col = dt * 8 + 2 * t;
    const float v0 = AmaxOf(p, seq, kvh, 1, col) / kE4m3Max;
    const float v1 = AmaxOf(p, seq, kvh, 1, col + 1) / kE4m3Max;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = at.row + r * 8;
      if (row >= rows) continue;
      __nv_bfloat16* dst = p.a.out + int64_t{si.q_begin + m0 + row} * out_stride + h * kHd + col;
      *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(
          o[dt * 4 + 2 * r] * v0 * inv[r], o[dt * 4 + 2 * r + 1] * v1 * inv[r]);
    }
  }
}

// The two consumer warpgroups run free (no turns for issuing their GEMMs).
__device__ __forceinline__ void Consume(const Fp8Params& p, const Ring& R, int seq, int h, int tile,
                                        int n_tiles, const SeqInfo& si) {
  const int wg = threadIdx.x >> 7, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3, m0 = tile * kT;
  const int wrow = wg * 64 + (warp & 3) * 16;  // this warp's first row in the q tile
  const int pos0 = si.prefix + m0 + wrow + g;  // positions of this thread's rows: +0, +8
  const int64_t qtile = int64_t{p.cu_q_tiles[seq] + tile} * p.a.num_heads + h;
  RowState st;
  const float scale_log2 = p.a.scale * kLog2e;
  st.f[0] = scale_log2 * p.qscale[qtile * kT + wrow + g];
  st.f[1] = scale_log2 * p.qscale[qtile * kT + wrow + g + 8];
  const uint32_t q = R.q() + wg * 64 * 128;
  float s[64], o[64], alpha[2];
  uint32_t pf[4][4], pn[4][4];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  auto needs_mask = [&](int j) { return (j + 1) * kT - 1 > si.prefix + m0 + wrow; };
  mbar::Wait(R.q_full(), 0);
  mbar::Wait(R.k_full(0), 0);
  FenceOperands(s, o, pf);
  IssueQk(s, q, R.k(0));
  wgmma::Wait<0>();
  wgmma::FenceRegs(s);
  Release(R.k_empty(0), lane);
  Softmax(s, pf, st, alpha, needs_mask(0), 0, pos0, t);
  // Tile j's softmax writes the P registers that tile j-1's P V is not reading: two sets
  // alternate (a copy between them would let ptxas merge them and serialize the wgmmas).
  auto step = [&](int j, uint32_t(&p_prev)[4][4], uint32_t(&p_next)[4][4]) {
    const int cur = j & 1, prev = cur ^ 1;
    mbar::Wait(R.k_full(cur), (j >> 1) & 1);
    mbar::Wait(R.v_full(prev), ((j - 1) >> 1) & 1);
    FenceOperands(s, o, p_prev);
    IssueQk(s, q, R.k(cur));        // S of tile j ...
    IssuePv(o, p_prev, R.v(prev));  // ... while P V of tile j - 1 runs
    wgmma::Wait<1>();
    wgmma::FenceRegs(s);
    Release(R.k_empty(cur), lane);
    Softmax(s, p_next, st, alpha, needs_mask(j), j * kT, pos0, t);
    wgmma::Wait<0>();
    wgmma::FenceRegs(o);
    Release(R.v_empty(prev), lane);
    // Most tiles leave every row's maximum where it was (alpha = 1): skip the rescale then.
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
      for (int i = 0; i < 64; ++i) o[i] *= alpha[(i >> 1) & 1];
    }
  };
  auto finish = [&](uint32_t(&p_last)[4][4]) {
    const int last = (n_tiles - 1) & 1;
    mbar::Wait(R.v_full(last), ((n_tiles - 1) >> 1) & 1);
    FenceOperands(s, o, p_last);
    IssuePv(o, p_last, R.v(last));
    wgmma::Wait<0>();
    wgmma::FenceRegs(o);
    Release(R.v_empty(last), lane);
  };
  int j = 1;
  for (; j + 1 < n_tiles; j += 2) {
    step(j, pf, pn);
    step(j + 1, pn, pf);
  }
  if (j < n_tiles) {
    step(j, pf, pn);
    finish(pn);
  } else {
    finish(pf);
  }

  StoreRows(p, o, st, {seq, h, m0, wrow + g, t}, si);
}

__global__ void __launch_bounds__(kThreads, 1) PrefillFp8Kernel(Fp8Params p) {
  extern __shared__ unsigned char smem_raw[];
  const int seq = blockIdx.z, h = blockIdx.y;
  const int tile = gridDim.x - 1 - blockIdx.x;  // longest (latest) tiles first
  const SeqInfo si = Seq(p.a, seq);
  if (tile * kT >= si.new_len) return;
  const int n_keys = si.prefix + min(si.new_len, (tile + 1) * kT);  // the last row's position + 1
  const int n_tiles = (n_keys + kT - 1) / kT;
  const uint32_t base = (SmemAddr(smem_raw) + 1023) & ~1023u;
  const Ring R{base};
  if (threadIdx.x == 0) {
    mbar::Init(R.q_full(), 1);
    for (int s = 0; s < 2; ++s) {
      mbar::Init(R.k_full(s), 1);
      mbar::Init(R.v_full(s), 1);
      mbar::Init(R.k_empty(s), kConsumerThreads / 32);  // one arrival per consumer warp
      mbar::Init(R.v_empty(s), kConsumerThreads / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // Registers move from the producer warpgroup to the consumers (per SM sub-partition one warp
  // of each: 32 + 2 x 232 <= 512 per lane).
  if (threadIdx.x >= kConsumerThreads) {
    mbar::RegDealloc<32>();
    if (threadIdx.x == kConsumerThreads) Produce(p, R, seq, h, tile, n_tiles);
    return;
  }
  mbar::RegAlloc<232>();
  Consume(p, R, seq, h, tile, n_tiles, si);
}

}  // namespace

bool PrefillAttentionFp8Supported(const KvCacheLayer& cache) {
  const int k = cache.num_kv_heads;
  return cache.head_dim == kHd && k > 0 && k <= 16 && (k & (k - 1)) == 0;
}

size_t PrefillAttentionFp8WorkspaceBytes(int q_tiles, int key_tiles, int max_seqs, int num_heads,
                                         int num_kv_heads) {
  return LayoutFor(q_tiles, key_tiles, max_seqs, num_heads, num_kv_heads).end;
}

void PlanFp8AttentionTiles(const int32_t* new_tokens, const int32_t* contexts, int num_seqs,
                           int32_t* cu_q_tiles, int32_t* cu_key_tiles,
                           PrefillAttentionFp8Args* args) {
  cu_q_tiles[0] = cu_key_tiles[0] = 0;
  args->max_key_tiles = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const int kt = (contexts[s] + kT - 1) / kT;
    cu_q_tiles[s + 1] = cu_q_tiles[s] + (new_tokens[s] + kT - 1) / kT;
    cu_key_tiles[s + 1] = cu_key_tiles[s] + kt;
    args->max_key_tiles = std::max(args->max_key_tiles, kt);
  }
  args->total_q_tiles = cu_q_tiles[num_seqs];
  args->total_key_tiles = cu_key_tiles[num_seqs];
}

void PrefillAttentionFp8Forward(const PrefillAttentionFp8Args& args, const KvCacheLayer& cache,
                                cudaStream_t stream) {
  PrefillAttentionArgs a = args.attn;
  if (a.q_stride == 0) a.q_stride = int64_t{a.num_heads} * cache.head_dim;
  if (a.scale == 0.0f) a.scale = 1.0f / std::sqrt(static_cast<float>(cache.head_dim));
  assert(PrefillAttentionFp8Supported(cache));
  assert(a.q && a.out && a.cu_seqlens && a.prefix_lens && a.block_tables);
  assert(args.cu_q_tiles && args.cu_key_tiles && args.workspace);
  assert(a.num_heads % cache.num_kv_heads == 0 && a.q_stride % 8 == 0);
  if (a.num_seqs == 0 || a.max_q_len == 0) return;
  const int kvh = cache.num_kv_heads;
  const Fp8Layout L =
      LayoutFor(args.total_q_tiles, args.total_key_tiles, a.num_seqs, a.num_heads, kvh);
  assert(L.end <= args.workspace_bytes);
  auto* ws = static_cast<uint8_t*>(args.workspace);
  const Fp8Params p{a,
                    cache,
                    args.cu_q_tiles,
                    args.cu_key_tiles,
                    reinterpret_cast<uint32_t*>(ws + L.amax),
                    ws + L.q8,
                    reinterpret_cast<float*>(ws + L.qscale),
                    ws + L.k8,
                    ws + L.vt8};
  const int q_tiles = (a.max_q_len + kT - 1) / kT;
  CUDA_CHECK(cudaMemsetAsync(p.amax, 0, size_t(a.num_seqs) * kvh * 2 * kHd * 4, stream));
  KvAmaxKernel<<<dim3(args.max_key_tiles * (kT / kAmaxKeys), a.num_seqs), 256, kvh * 2 * kHd * 4,
                 stream>>>(p);
  CUDA_CHECK_LAUNCH();
  QuantKvKernel<<<dim3(args.max_key_tiles, a.num_seqs, kvh), 256, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
  QuantQKernel<<<dim3(q_tiles, a.num_seqs, a.num_heads), 128, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
  // Free-running warpgroups: a ping-pong schedule (the warpgroups taking turns to issue their
  // GEMMs) was slower on the H200 (Qwen3-4B layer: 0.861 vs 0.886 ms at 8K, 10.01 vs 10.44 ms at
  // 32K; bench/results/gpu_tests_4d1b75d_h200.log) and was deleted with DQ_PREFILL_FP8_KERNEL.
  auto kernel = PrefillFp8Kernel;
  // Not a stream operation, so it is allowed during graph capture.
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  kernel<<<dim3(q_tiles, a.num_heads, a.num_seqs), kThreads, kSmem, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dq::cuda
