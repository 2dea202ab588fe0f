// The persistent decode kernel's attention-side tasks: QK-norm + RoPE + the K/V write of one
// (row, kv head), and paged decode attention of one (row, kv head). Both restate the arithmetic
// of the kernels the reference path launches (rope.cu QkNormRopeKernel, attention_decode.cu
// DecodeSplitKernel + DecodeReduceKernel) in the same order, so their outputs are the same bits.
// Attention cuts the context into the reference's partitions (DecodePartLen of its grid); each
// partition is run by a group of 4 warps exactly as one block of the split kernel runs it, the
// CTA's two groups taking partitions side by side, and the partials merge as its reduce kernel
// merges them.
#pragma once

#include "engine/cuda/attention_tile.cuh"
#include "engine/cuda/kernel_util.cuh"
#include "engine/cuda/persistent_decode_common.cuh"

namespace dq::cuda::pd {

// ---- QK-norm + RoPE + K/V write ----

// One warp: head `h` of row `t` (h < heads: a query head; else the row's key head `h - heads`),
// normed, rotated and written back (and a key to its cache slot).
template <int kHeadDim>
__device__ void RopeHead(const PersistentDecodeParams& p, const PdBlock& b, int t, int h, bool is_q,
                         int slot) {
  constexpr int kHalf = kHeadDim / 2, kPairs = kHalf / 32;
  const int lane = threadIdx.x & 31;
  const bool inter = p.rope_interleaved != 0;
  const int q_dim = p.num_heads * kHeadDim, kv_dim = p.num_kv_heads * kHeadDim;
  const int64_t qkv_w = q_dim + 2 * kv_dim;
  const float* nw = is_q ? b.q_norm : b.k_norm;
  const float pos = static_cast<float>(p.positions[t]);
  float sn[kPairs], cs[kPairs], wa[kPairs], wb[kPairs], x1[kPairs], x2[kPairs];
  __nv_bfloat16* x = p.qkv + t * qkv_w + (is_q ? h * kHeadDim : q_dim + h * kHeadDim);
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const int i = lane + 32 * j;
    const int ia = inter ? 2 * i : i, ib = inter ? 2 * i + 1 : i + kHalf;
    sincosf(pos * p.inv_freq[i], &sn[j], &cs[j]);
    wa[j] = nw != nullptr ? nw[ia] : 1.0f;
    wb[j] = nw != nullptr ? nw[ib] : 1.0f;
    x1[j] = LdCgBf16(x + ia);
    x2[j] = LdCgBf16(x + ib);
  }
  if (nw != nullptr) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kPairs; ++j) ss += x1[j] * x1[j] + x2[j] * x2[j];
    ss = detail::WarpSum(ss);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(kHeadDim) + p.eps);
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      x1[j] = wa[j] * (x1[j] * inv);
      x2[j] = wb[j] * (x2[j] * inv);
    }
  }
  const int64_t stride = int64_t{p.num_kv_heads} * kHeadDim;
  __nv_bfloat16* dst = (!is_q && slot >= 0) ? b.k_cache + slot * stride + h * kHeadDim : nullptr;
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const int i = lane + 32 * j;
    const int ia = inter ? 2 * i : i, ib = inter ? 2 * i + 1 : i + kHalf;
    const float s = sn[j], c = cs[j];
    const __nv_bfloat16 ya = __float2bfloat16(x1[j] * c - x2[j] * s);
    const __nv_bfloat16 yb = __float2bfloat16(x2[j] * c + x1[j] * s);
    x[ia] = ya;
    x[ib] = yb;
    if (dst != nullptr) dst[ia] = ya, dst[ib] = yb;
  }
}

// Item (row, kv head): its query heads and key rotated, its key and value written to the cache.
template <int kHeadDim>
__device__ void RopeKvTask(const PersistentDecodeParams& p, const PdBlock& b, int64_t item) {
  const int t = static_cast<int>(item / p.num_kv_heads),
            kvh = static_cast<int>(item % p.num_kv_heads);
  const int group = p.num_heads / p.num_kv_heads;
  const int slot = p.slots[t];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int job = warp; job < group + 2; job += kWarps) {
    if (job == group + 1) {  // V: copied into the cache
      if (slot < 0) continue;
      const int64_t qkv_w = int64_t{p.num_heads + 2 * p.num_kv_heads} * kHeadDim;
      const __nv_bfloat16* src =
          p.qkv + t * qkv_w + int64_t{p.num_heads + p.num_kv_heads + kvh} * kHeadDim;
      __nv_bfloat16* dst = b.v_cache + int64_t{slot} * p.num_kv_heads * kHeadDim + kvh * kHeadDim;
      for (int i = lane; i < kHeadDim / 2; i += 32) {
        reinterpret_cast<uint32_t*>(dst)[i] = LdCgU32(src + 2 * i);
      }
    } else if (job < group) {
      RopeHead<kHeadDim>(p, b, t, kvh * group + job, true, slot);
    } else {
      RopeHead<kHeadDim>(p, b, t, kvh, false, slot);
    }
  }
}

// ---- decode attention ----

constexpr int kAttnTileKeys = 16;
constexpr int kAttnStages = 3;
constexpr int kAttnGroupWarps = 4;
constexpr float kLog2e = 1.4426950408889634f;

// attention_decode.cu's DecodePartLen (kMinPartKeys 32, kSinglePartKeys 256).
__device__ __forceinline__ int PartLen(int ctx, int grid_splits, int fixed) {
  if (fixed > 0) return fixed;
  const int n = ctx <= 256 ? 1 : min(grid_splits, max(1, (ctx + 31) / 32));
  const int part = (ctx + n - 1) / n;
  return (part + kAttnTileKeys - 1) / kAttnTileKeys * kAttnTileKeys;
}

__device__ __forceinline__ void GroupBarrier(int id) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(kAttnGroupWarps * 32) : "memory");
}
__device__ __forceinline__ void Ldsm4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void Ldsm4T(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void MmaHalfA(float (&c)[4], uint32_t a0, uint32_t a2, uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}
template <int kHeadDim>
__device__ __forceinline__ uint32_t TileAddr(uint32_t base, int row, int chunk) {
  return base + (row * kHeadDim + ((chunk ^ (row & 7)) << 3)) * 2;
}

struct AttnItem {
  int row, kvh, ctx, part_len, num_splits;
  const __nv_bfloat16* k;
  const __nv_bfloat16* v;
};

// Partition `split` of the item by one 4-warp group (gw: its warp 0..3, `bar`: its barrier), as
// one block of DecodeSplitKernel computes it: the output itself when the context is one
// partition, else its unnormalised output and softmax state in the workspace.
template <int kHeadDim>
__device__ void AttentionPartition(const PersistentDecodeParams& p, const AttnItem& it, int split,
                                   unsigned char* smem, int gw, int bar) {
  constexpr int kTileBytes = kAttnTileKeys * kHeadDim * 2, kDTiles = kHeadDim / 8;
  constexpr int kChunks = kHeadDim / 8, kRowsPerPass = 32 / kChunks;
  const int start = split * it.part_len, end = min(it.ctx, start + it.part_len);
  const int n_tiles = (end - start + kAttnTileKeys - 1) / kAttnTileKeys;
  const int group = p.num_heads / p.num_kv_heads;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int32_t* table = p.block_tables + int64_t{it.row} * p.max_blocks_per_seq;
  const int64_t stride = int64_t{p.num_kv_heads} * kHeadDim;
  const int bs = p.block_size;
  const bool tile_in_block = (bs % kAttnTileKeys) == 0;
  const uint32_t ring = SmemAddr32(smem) + gw * kAttnStages * 2 * kTileBytes;
  const int my_tiles = n_tiles > gw ? (n_tiles - gw + kAttnGroupWarps - 1) / kAttnGroupWarps : 0;
  auto load = [&](int i, int stage) {
    const int key0 = start + (gw + i * kAttnGroupWarps) * kAttnTileKeys;
    const uint32_t kd = ring + stage * 2 * kTileBytes, vd = kd + kTileBytes;
    const int ch = lane % kChunks, r0 = lane / kChunks;
    int64_t base0 = 0;
    if (tile_in_block) {
      const int blk = key0 / bs;
      base0 = int64_t{table[blk]} * bs + (key0 - blk * bs);
    }
#pragma unroll
    for (int k = 0; k < kAttnTileKeys / kRowsPerPass; ++k) {
      const int r = r0 + k * kRowsPerPass, pos = key0 + r;
      const bool valid = pos < end;
      int64_t slot;
      if (tile_in_block) {
        slot = base0 + r;
      } else {
        const int q = valid ? pos : start, blk = q / bs;
        slot = int64_t{table[blk]} * bs + (q - blk * bs);
      }
      const int64_t off = (valid ? slot : 0) * stride + it.kvh * kHeadDim + ch * 8;
      attn::CpAsync16(TileAddr<kHeadDim>(kd, r, ch), it.k + off, valid);
      attn::CpAsync16(TileAddr<kHeadDim>(vd, r, ch), it.v + off, valid);
    }
  };
#pragma unroll
  for (int s = 0; s < kAttnStages; ++s) {
    if (s < my_tiles) load(s, s);
    attn::CpAsyncCommit();
  }
  uint32_t qa[kHeadDim / 16][2];
  {
    const int64_t qkv_w = int64_t{p.num_heads + 2 * p.num_kv_heads} * kHeadDim;
    const __nv_bfloat16* qp = p.qkv + it.row * qkv_w + (it.kvh * group + g) * kHeadDim + 2 * t;
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      qa[kk][0] = g < group ? LdCgU32(qp + kk * 16) : 0u;
      qa[kk][1] = g < group ? LdCgU32(qp + kk * 16 + 8) : 0u;
    }
  }
  const float scale_log2 = p.attn_scale * kLog2e;
  float o[kDTiles][4] = {};
  float row_max = -INFINITY, row_sum = 0.0f;
  for (int i = 0; i < my_tiles; ++i) {
    const int stage = i % kAttnStages;
    const uint32_t k_s = ring + stage * 2 * kTileBytes, v_s = k_s + kTileBytes;
    attn::CpAsyncWait<kAttnStages - 1>();
    __syncwarp();
    float s[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      uint32_t b[4];
      Ldsm4(b,
            TileAddr<kHeadDim>(k_s, (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1)));
      MmaHalfA(s[0], qa[kk][0], qa[kk][1], b[0], b[1]);
      MmaHalfA(s[1], qa[kk][0], qa[kk][1], b[2], b[3]);
    }
    const int key0 = start + (gw + i * kAttnGroupWarps) * kAttnTileKeys;
    float pr[2][2], tmax = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = key0 + nt * 8 + 2 * t + e;
        pr[nt][e] = key < end ? s[nt][e] * scale_log2 : -INFINITY;
        tmax = fmaxf(tmax, pr[nt][e]);
      }
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
    const float m_new = fmaxf(row_max, tmax);
    const float alpha = exp2f(row_max - m_new);
    row_max = m_new;
    row_sum *= alpha;
    uint32_t hi[2], lo[2];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const float p0 = exp2f(pr[nt][0] - m_new), p1 = exp2f(pr[nt][1] - m_new);
      row_sum += p0 + p1;
      const __nv_bfloat162 h2 = __floats2bfloat162_rn(p0, p1);
      const float2 hf = __bfloat1622float2(h2);
      hi[nt] = *reinterpret_cast<const uint32_t*>(&h2);
      lo[nt] = attn::PackBf16(p0 - hf.x, p1 - hf.y);
    }
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) o[dt][0] *= alpha, o[dt][1] *= alpha;
#pragma unroll
    for (int dp = 0; dp < kHeadDim / 16; ++dp) {
      uint32_t b[4];
      Ldsm4T(b,
             TileAddr<kHeadDim>(v_s, (lane & 7) + (((lane >> 3) & 1) << 3), dp * 2 + (lane >> 4)));
      MmaHalfA(o[2 * dp], hi[0], hi[1], b[0], b[1]);
      MmaHalfA(o[2 * dp + 1], hi[0], hi[1], b[2], b[3]);
      MmaHalfA(o[2 * dp], lo[0], lo[1], b[0], b[1]);
      MmaHalfA(o[2 * dp + 1], lo[0], lo[1], b[2], b[3]);
    }
    __syncwarp();
    if (i + kAttnStages < my_tiles) load(i + kAttnStages, stage);
    attn::CpAsyncCommit();
  }
  row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 1);
  row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 2);
  attn::CpAsyncWait<0>();
  GroupBarrier(bar);
  float* red_o = reinterpret_cast<float*>(smem);  // [4][8][kHeadDim]
  float* red_m = red_o + kAttnGroupWarps * 8 * kHeadDim;
  float* red_l = red_m + kAttnGroupWarps * 8;
  if (g < group) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      red_o[(gw * 8 + g) * kHeadDim + dt * 8 + 2 * t] = o[dt][0];
      red_o[(gw * 8 + g) * kHeadDim + dt * 8 + 2 * t + 1] = o[dt][1];
    }
    if (t == 0) red_m[gw * 8 + g] = row_max, red_l[gw * 8 + g] = row_sum;
  }
  GroupBarrier(bar);
  const int64_t heads = p.num_heads, ws_states = int64_t{p.rows} * heads * p.ws_splits;
  for (int idx = gw * 32 + lane; idx < group * kHeadDim; idx += kAttnGroupWarps * 32) {
    const int j = idx / kHeadDim, d = idx % kHeadDim;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kAttnGroupWarps; ++w) m = fmaxf(m, red_m[w * 8 + j]);
    float l = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kAttnGroupWarps; ++w) {
      const float f = exp2f(red_m[w * 8 + j] - m);
      l += red_l[w * 8 + j] * f;
      acc += red_o[(w * 8 + j) * kHeadDim + d] * f;
    }
    const int h = it.kvh * group + j;
    if (it.num_splits == 1) {
      p.attn[(int64_t{it.row} * heads + h) * kHeadDim + d] = __float2bfloat16(acc / l);
    } else {
      const int64_t state = (int64_t{it.row} * heads + h) * p.ws_splits + split;
      p.ws[state * kHeadDim + d] = acc;
      if (d == 0)
        p.ws[ws_states * kHeadDim + state] = m, p.ws[ws_states * (kHeadDim + 1) + state] = l;
    }
  }
  GroupBarrier(bar);  // the group's shared memory is free for its next partition
}

// Item (row, kv head): every partition of its context, then (more than one) their merge.
template <int kHeadDim>
__device__ void AttentionTask(const PersistentDecodeParams& p, const PdBlock& b, int64_t item,
                              unsigned char* smem) {
  AttnItem it;
  it.row = static_cast<int>(item / p.num_kv_heads);
  it.kvh = static_cast<int>(item % p.num_kv_heads);
  it.ctx = p.context_lens[it.row];
  it.part_len = PartLen(it.ctx, p.grid_splits, p.fixed_partition);
  it.num_splits = (it.ctx + it.part_len - 1) / it.part_len;
  it.k = b.k_cache;
  it.v = b.v_cache;
  const int warp = threadIdx.x >> 5, grp = warp / kAttnGroupWarps;
  if (grp < p.attn_groups) {
    unsigned char* gsmem = smem + grp * AttnGroupBytes(kHeadDim);
    for (int split = grp; split < it.num_splits; split += p.attn_groups) {
      AttentionPartition<kHeadDim>(p, it, split, gsmem, warp % kAttnGroupWarps, 1 + grp);
    }
  }
  __syncthreads();
  if (it.num_splits <= 1) return;
  const int group = p.num_heads / p.num_kv_heads;
  const int64_t heads = p.num_heads, ws_states = int64_t{p.rows} * heads * p.ws_splits;
  const float* ws_max = p.ws + ws_states * kHeadDim;
  const float* ws_sum = ws_max + ws_states;
  for (int idx = threadIdx.x; idx < group * kHeadDim; idx += kPdThreads) {
    const int j = idx / kHeadDim, d = idx % kHeadDim, h = it.kvh * group + j;
    const int64_t state0 = (int64_t{it.row} * heads + h) * p.ws_splits;
    float m = -INFINITY;
    for (int s = 0; s < it.num_splits; ++s) m = fmaxf(m, ws_max[state0 + s]);
    float l = 0.0f, o = 0.0f;
#pragma unroll 4
    for (int s = 0; s < it.num_splits; ++s) {
      const float w = exp2f(ws_max[state0 + s] - m);
      l += ws_sum[state0 + s] * w;
      o += p.ws[(state0 + s) * kHeadDim + d] * w;
    }
    p.attn[(int64_t{it.row} * heads + h) * kHeadDim + d] = __float2bfloat16(o / l);
  }
}

}  // namespace dq::cuda::pd
