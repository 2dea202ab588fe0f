#include <cassert>
#include <cmath>
#include <cstdlib>

#include "engine/cuda/attention_decode.h"
#include "engine/cuda/attention_tile.cuh"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernel_util.cuh"

namespace dq::cuda {
namespace {

// Split kernel: block (split, kv_head, seq) of kWarps warps covers one partition of the context
// (a multiple of kDecodePartition tokens, chosen on the host to fill the GPU). Each warp streams
// its own 16-key tiles (tiles warp, warp + kWarps, ...) of K and V through a private kStages-deep
// cp.async ring in shared memory, so many bytes are in flight per SM and no block barrier sits
// in the loop; the math is tensor-core mma.sync with the group's query heads as rows of a 16-row
// A operand: S = Q K^T, then a single-pass online softmax (exp2, log2-domain state), O += P V
// with P split into bf16 hi + lo parts (fp32-grade probabilities at no memory cost). The warps'
// states merge through shared memory; a second kernel merges the partitions.
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTileKeys = 16;
// Ring depth per warp: 3 stages (two blocks per SM). A 4-stage ring was slower at every measured
// shape (H200, Qwen3-4B, bench/results/gpu_attention_timing_h200.json: e.g. 8 seqs x 8K keys
// 76.2 vs 89.6 us, 32 x 4K 135.4 vs 160.1 us) and was deleted with its DQ_DECODE_STAGES knob.
constexpr int kStages = 3;
constexpr float kLog2e = 1.4426950408889634f;

int MaxSplits(int max_context) { return (max_context + kDecodePartition - 1) / kDecodePartition; }

struct Workspace {  // partial (unnormalised) outputs and softmax states (log2 domain) per split
  float* out;       // [seqs, heads, splits, head_dim]
  float* max;       // [seqs, heads, splits]
  float* sum;       // [seqs, heads, splits]
};

Workspace Carve(void* base, int seqs, int heads, int head_dim, int splits) {
  float* f = static_cast<float*>(base);
  const int64_t states = int64_t{seqs} * heads * splits;
  return {f, f + states * head_dim, f + states * head_dim + states};
}

using attn::CpAsync16;
using attn::CpAsyncCommit;
using attn::CpAsyncWait;
using attn::SmemAddr;
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
// m16n8k16 with A rows 8..15 zero (a1 = a3 = 0): only the group's heads (rows 0..7) are real.
__device__ __forceinline__ void Mma(float (&c)[4], uint32_t a0, uint32_t a2, uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// Tiles are [kTileKeys][kHeadDim] bf16, the 16-byte chunk index XOR-swizzled by row % 8.
template <int kHeadDim>
__device__ __forceinline__ uint32_t TileAddr(uint32_t base, int row, int chunk) {
  return base + (row * kHeadDim + ((chunk ^ (row & 7)) << 3)) * 2;
}

template <int kHeadDim>
constexpr int SplitSmemBytes() {
  return kWarps * kStages * 2 * kTileKeys * kHeadDim * 2;
}

// Keys per partition for a context of `ctx` over at most `grid_splits` partitions: the context
// is cut into as many partitions as the grid has (at least kMinPartKeys each, a multiple of
// kTileKeys), so a short context still spreads over several blocks and a long one over all of
// them. Computed on the device from the actual length because a captured decode graph fixes
// the grid for every context.
// A context of up to kSinglePartKeys keys is one partition (no partials to merge): measured at
// 128 keys (H200, Qwen3-4B shape), four 32-key partitions + their merge cost 8.5 us per layer.
constexpr int kMinPartKeys = 32;
constexpr int kSinglePartKeys = 256;
__device__ __forceinline__ int DecodePartLen(int ctx, int grid_splits, int fixed) {
  if (fixed > 0) return fixed;
  const int n = ctx <= kSinglePartKeys
                    ? 1
                    : min(grid_splits, max(1, (ctx + kMinPartKeys - 1) / kMinPartKeys));
  const int part = (ctx + n - 1) / n;
  return (part + kTileKeys - 1) / kTileKeys * kTileKeys;
}

template <int kHeadDim>
__global__ void __launch_bounds__(kThreads)
    DecodeSplitKernel(DecodeAttentionArgs a, KvCacheLayer c, Workspace ws, int splits) {
  constexpr int kTileBytes = kTileKeys * kHeadDim * 2, kDTiles = kHeadDim / 8;
  constexpr int kChunks = kHeadDim / 8, kRowsPerPass = 32 / kChunks;
  extern __shared__ __align__(128) unsigned char smem[];
  // Before griddepcontrol.wait this block reads only what the previous kernel cannot have
  // written: the step's metadata and the keys/values of positions before ctx - 1 (a decode step
  // writes only the new token's, at ctx - 1), so the first tiles stream while it drains.
  const int seq = blockIdx.z, kvh = blockIdx.y, split = blockIdx.x;
  const int ctx = a.context_lens[seq];
  const int part_len = DecodePartLen(ctx, gridDim.x, a.fixed_partition);
  const int start = split * part_len;
  if (start >= ctx) {
    detail::PdlWait();
    detail::PdlTrigger();
    return;
  }
  const int end = min(ctx, start + part_len);
  const int n_tiles = (end - start + kTileKeys - 1) / kTileKeys;
  const int group = a.num_heads / c.num_kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int32_t* table = a.block_tables + int64_t{seq} * a.max_blocks_per_seq;
  const int64_t stride = c.token_stride();
  const int bs = c.block_size;
  const bool tile_in_block = (bs % kTileKeys) == 0;  // tiles start 16-aligned
  const uint32_t ring = SmemAddr(smem) + warp * kStages * 2 * kTileBytes;
  const int my_tiles = n_tiles > warp ? (n_tiles - warp + kWarps - 1) / kWarps : 0;

  auto load = [&](int i, int stage) {  // this warp's i-th tile into `stage`
    const int key0 = start + (warp + i * kWarps) * kTileKeys;
    const uint32_t kd = ring + stage * 2 * kTileBytes, vd = kd + kTileBytes;
    const int ch = lane % kChunks, r0 = lane / kChunks;
    int64_t base0 = 0;
    if (tile_in_block) {
      const int blk = key0 / bs;
      base0 = int64_t{table[blk]} * bs + (key0 - blk * bs);
    }
#pragma unroll
    for (int k = 0; k < kTileKeys / kRowsPerPass; ++k) {
      const int r = r0 + k * kRowsPerPass, pos = key0 + r;
      const bool valid = pos < end;
      int64_t slot;
      if (tile_in_block) {
        slot = base0 + r;
      } else {
        const int p = valid ? pos : start, blk = p / bs;
        slot = int64_t{table[blk]} * bs + (p - blk * bs);
      }
      const int64_t off = (valid ? slot : 0) * stride + kvh * kHeadDim + ch * 8;
      CpAsync16(TileAddr<kHeadDim>(kd, r, ch), c.k + off, valid);
      CpAsync16(TileAddr<kHeadDim>(vd, r, ch), c.v + off, valid);
    }
  };
  // Tile i holds keys [key0, key0 + 16): safe before the wait when they all precede ctx - 1.
  auto early = [&](int i) {
    return !a.fresh_span && start + (warp + i * kWarps + 1) * kTileKeys < ctx;
  };
  bool deferred = false;
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    if (s < my_tiles) {
      if (early(s)) {
        load(s, s);
      } else {
        deferred = true;
      }
    }
    CpAsyncCommit();
  }
  detail::PdlWait();
  detail::PdlTrigger();
  if (deferred) {  // the tile with the new token (only among a warp's first kStages when short)
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      if (s < my_tiles && !early(s)) load(s, s);
    }
    CpAsyncCommit();
    CpAsyncWait<0>();
  }

  // Q as the A operand: row g = head kvh * group + g (rows >= group and 8..15 are zero).
  uint32_t qa[kHeadDim / 16][2];
  {
    const __nv_bfloat16* qp = a.q + seq * a.q_stride + (kvh * group + g) * kHeadDim + 2 * t;
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      qa[kk][0] = g < group ? *reinterpret_cast<const uint32_t*>(qp + kk * 16) : 0u;
      qa[kk][1] = g < group ? *reinterpret_cast<const uint32_t*>(qp + kk * 16 + 8) : 0u;
    }
  }
  const float scale_log2 = a.scale * kLog2e;
  float o[kDTiles][4] = {};
  float row_max = -INFINITY, row_sum = 0.0f;
  for (int i = 0; i < my_tiles; ++i) {
    const int stage = i % kStages;
    const uint32_t k_s = ring + stage * 2 * kTileBytes, v_s = k_s + kTileBytes;
    CpAsyncWait<kStages - 1>();
    __syncwarp();
    float s[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      uint32_t b[4];
      Ldsm4(b,
            TileAddr<kHeadDim>(k_s, (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1)));
      Mma(s[0], qa[kk][0], qa[kk][1], b[0], b[1]);
      Mma(s[1], qa[kk][0], qa[kk][1], b[2], b[3]);
    }
    const int key0 = start + (warp + i * kWarps) * kTileKeys;
    float p[2][2], tmax = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = key0 + nt * 8 + 2 * t + e;
        p[nt][e] = key < end ? s[nt][e] * scale_log2 : -INFINITY;
        tmax = fmaxf(tmax, p[nt][e]);
      }
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
    const float m_new = fmaxf(row_max, tmax);  // finite: each tile holds a valid key
    const float alpha = exp2f(row_max - m_new);
    row_max = m_new;
    row_sum *= alpha;
    uint32_t hi[2], lo[2];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const float p0 = exp2f(p[nt][0] - m_new), p1 = exp2f(p[nt][1] - m_new);
      row_sum += p0 + p1;
      const __nv_bfloat162 h2 = __floats2bfloat162_rn(p0, p1);
      const float2 hf = __bfloat1622float2(h2);
      hi[nt] = *reinterpret_cast<const uint32_t*>(&h2);
      lo[nt] = PackBf16(p0 - hf.x, p1 - hf.y);
    }
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) o[dt][0] *= alpha, o[dt][1] *= alpha;
#pragma unroll
    for (int dp = 0; dp < kHeadDim / 16; ++dp) {
      uint32_t b[4];
      Ldsm4T(b,
             TileAddr<kHeadDim>(v_s, (lane & 7) + (((lane >> 3) & 1) << 3), dp * 2 + (lane >> 4)));
      Mma(o[2 * dp], hi[0], hi[1], b[0], b[1]);
      Mma(o[2 * dp + 1], hi[0], hi[1], b[2], b[3]);
      Mma(o[2 * dp], lo[0], lo[1], b[0], b[1]);
      Mma(o[2 * dp + 1], lo[0], lo[1], b[2], b[3]);
    }
    __syncwarp();  // every lane is done with this stage before it is refilled
    if (i + kStages < my_tiles) load(i + kStages, stage);
    CpAsyncCommit();
  }
  row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 1);
  row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 2);

  // Merge the warps' states through shared memory (the rings are idle now).
  CpAsyncWait<0>();
  __syncthreads();
  float* red_o = reinterpret_cast<float*>(smem);  // [kWarps][8][kHeadDim]
  float* red_m = red_o + kWarps * 8 * kHeadDim;   // [kWarps][8]
  float* red_l = red_m + kWarps * 8;
  if (g < group) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      red_o[(warp * 8 + g) * kHeadDim + dt * 8 + 2 * t] = o[dt][0];
      red_o[(warp * 8 + g) * kHeadDim + dt * 8 + 2 * t + 1] = o[dt][1];
    }
    if (t == 0) red_m[warp * 8 + g] = row_max, red_l[warp * 8 + g] = row_sum;
  }
  __syncthreads();
  const int num_splits = (ctx + part_len - 1) / part_len;
  for (int idx = threadIdx.x; idx < group * kHeadDim; idx += kThreads) {
    const int j = idx / kHeadDim, d = idx % kHeadDim;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, red_m[w * 8 + j]);  // finite: warp 0 ran
    float l = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float f = exp2f(red_m[w * 8 + j] - m);  // 0 for a warp without tiles
      l += red_l[w * 8 + j] * f;
      acc += red_o[(w * 8 + j) * kHeadDim + d] * f;
    }
    const int h = kvh * group + j;
    if (num_splits == 1) {
      a.out[(int64_t{seq} * a.num_heads + h) * kHeadDim + d] = __float2bfloat16(acc / l);
    } else {
      const int64_t state = (int64_t{seq} * a.num_heads + h) * splits + split;
      ws.out[state * kHeadDim + d] = acc;
      if (d == 0) ws.max[state] = m, ws.sum[state] = l;
    }
  }
}

// Block (head, seq), one thread per output dim: merges the partitions' softmax states.
__global__ void DecodeReduceKernel(DecodeAttentionArgs a, Workspace ws, int splits, int head_dim,
                                   int grid_splits) {
  detail::PdlWait();
  detail::PdlTrigger();
  const int seq = blockIdx.y, h = blockIdx.x, d = threadIdx.x;
  const int ctx = a.context_lens[seq],
            part_len = DecodePartLen(ctx, grid_splits, a.fixed_partition);
  const int num_splits = (ctx + part_len - 1) / part_len;
  if (num_splits <= 1) return;  // written by the split kernel
  const int64_t state0 = (int64_t{seq} * a.num_heads + h) * splits;
  float m = -INFINITY;
  for (int s = 0; s < num_splits; ++s) m = fmaxf(m, ws.max[state0 + s]);
  float l = 0.0f, o = 0.0f;
#pragma unroll 4
  for (int s = 0; s < num_splits; ++s) {
    const float w = exp2f(ws.max[state0 + s] - m);
    l += ws.sum[state0 + s] * w;
    o += ws.out[(state0 + s) * head_dim + d] * w;
  }
  a.out[(int64_t{seq} * a.num_heads + h) * head_dim + d] = __float2bfloat16(o / l);
}

// Partition length (a multiple of kDecodePartition): the fewest partitions that keep every SM's
// resident blocks busy, costed as waves x (partition length + a fixed per-block overhead).
int PartitionLen(int seqs, int kv_heads, int max_context, int slots) {
  const int units = MaxSplits(max_context);
  constexpr int kOverheadKeys = 96;
  int64_t best_cost = -1;
  int best = units;
  for (int per = 1; per <= units; ++per) {
    const int parts = (units + per - 1) / per;
    if (per > 1 && (units + per - 2) / (per - 1) == parts) continue;  // same split count
    const int64_t blocks = int64_t{seqs} * kv_heads * parts;
    const int64_t waves = (blocks + slots - 1) / slots;
    const int64_t cost = waves * (int64_t{per} * kDecodePartition + kOverheadKeys) + parts;
    if (best_cost < 0 || cost < best_cost) best_cost = cost, best = per;
  }
  return best * kDecodePartition;
}

// The split kernel's resident blocks over the device (its attribute set on first use).
template <int kHeadDim>
int SplitSlots() {
  constexpr int kSmem = SplitSmemBytes<kHeadDim>();
  auto kernel = DecodeSplitKernel<kHeadDim>;
  // Host-side queries and attributes only (no stream operations): safe during graph capture.
  static const int slots = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    int dev = 0, sms = 0, per_sm = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, kSmem));
    return sms * (per_sm > 0 ? per_sm : 1);
  }();
  return slots;
}

template <int kHeadDim>
int HostPartLen(const DecodeAttentionArgs& a, const KvCacheLayer& c) {
  return a.fixed_partition > 0
             ? a.fixed_partition
             : PartitionLen(a.num_seqs, c.num_kv_heads, a.max_context, SplitSlots<kHeadDim>());
}

template <int kHeadDim>
void Launch(const DecodeAttentionArgs& a, const KvCacheLayer& c, cudaStream_t stream) {
  constexpr int kSmem = SplitSmemBytes<kHeadDim>();
  static_assert(kSmem >= (kWarps * 8 * kHeadDim + 2 * kWarps * 8) * 4, "merge scratch fits");
  auto kernel = DecodeSplitKernel<kHeadDim>;
  const int part_len = HostPartLen<kHeadDim>(a, c);
  const int splits = MaxSplits(a.max_context);  // workspace stride (>= partitions used)
  const Workspace ws = Carve(a.workspace, a.num_seqs, a.num_heads, kHeadDim, splits);
  // The grid: as many partitions as fill the GPU for max_context; a shorter context is cut into
  // as many (DecodePartLen), never fewer keys than kMinPartKeys each.
  const int grid_splits = (a.max_context + part_len - 1) / part_len;
  const dim3 grid(grid_splits, c.num_kv_heads, a.num_seqs);
  detail::LaunchPdl(kernel, grid, kThreads, kSmem, stream, a, c, ws, splits);
  detail::LaunchPdl(DecodeReduceKernel, dim3(a.num_heads, a.num_seqs), kHeadDim, 0, stream, a, ws,
                    splits, kHeadDim, grid_splits);
}

}  // namespace

size_t DecodeAttentionWorkspaceBytes(int num_seqs, int num_heads, int head_dim, int max_context) {
  const size_t states = size_t(num_seqs) * num_heads * MaxSplits(max_context);
  return states * (head_dim + 2) * sizeof(float);
}

int DecodeAttentionGridSplits(const DecodeAttentionArgs& a, const KvCacheLayer& cache) {
  const int part_len =
      cache.head_dim == 128 ? HostPartLen<128>(a, cache) : HostPartLen<64>(a, cache);
  return (a.max_context + part_len - 1) / part_len;
}

void DecodeAttentionForward(const DecodeAttentionArgs& args, const KvCacheLayer& cache,
                            cudaStream_t stream) {
  DecodeAttentionArgs a = args;
  if (a.q_stride == 0) a.q_stride = int64_t{a.num_heads} * cache.head_dim;
  if (a.scale == 0.0f) a.scale = 1.0f / std::sqrt(static_cast<float>(cache.head_dim));
  const int group = a.num_heads / cache.num_kv_heads;
  assert(a.q && a.out && a.block_tables && a.context_lens && a.max_context > 0);
  assert(group * cache.num_kv_heads == a.num_heads && group >= 1 && group <= 8);
  assert(a.workspace_bytes >=
         DecodeAttentionWorkspaceBytes(a.num_seqs, a.num_heads, cache.head_dim, a.max_context));
  assert(a.q_stride % 8 == 0);
  // The workspace holds MaxSplits(max_context) partitions per head.
  assert(a.fixed_partition >= 0 && a.fixed_partition % kDecodePartition == 0);
  (void)group;
  if (a.num_seqs == 0) return;
  // The one place head_dim becomes a template parameter.
  if (cache.head_dim == 128) return Launch<128>(a, cache, stream);
  if (cache.head_dim == 64) return Launch<64>(a, cache, stream);
  assert(false && "DecodeAttentionForward: head_dim must be 64 or 128");
}

}  // namespace dq::cuda
