// The persistent decode kernel's GEMV tasks: rows [begin, end) of one matrix times the step's
// input rows (staged in shared memory), in the int tile layout (gemv_int_tile.cu) or bf16.
//
// Int tile: a task's 16-row tiles are cut into the reference GEMV's jobs (tile, kw): job kw of
// a tile sums chunks kw, kw + KW, ... in order, and the KW partial sums meet in its tree, so the
// sums are the reference's to the bit. The CTA's 8 warps take jobs w, w + 8, ... and stream
// their chunks through one continuous cp.async ring each (no drain between jobs).
// Bf16: one warp per row, lane l summing units l, l + 32, ... then the xor reduction, as the
// reference bf16 GEMV (GemvKernel with Bf16Format) does.
#pragma once

#include "engine/cuda/persistent_decode_common.cuh"
#include "engine/cuda/weight_only_kernels.cuh"

namespace dq::cuda::pd {

enum class OutMode { kBf16, kAddF32, kSwiGlu };

// Where a GEMV task's sums go. kBf16: bf16[n * stride + row]. kAddF32: f32[n * stride + row]
// += sum (the residual stream, or logits over zero as the reference's memset + accumulate).
// kSwiGlu: gate row r and up row r pair into bf16[n * stride + r] = silu(gate) * up.
struct GemvOut {
  OutMode mode = OutMode::kBf16;
  __nv_bfloat16* bf16 = nullptr;
  float* f32 = nullptr;
  int64_t stride = 0;
  bool zero_base = false;  // kAddF32 over 0 instead of the current value (logits)
};

__device__ __forceinline__ float Silu(float g) { return g / (1.0f + expf(-g)); }

__device__ __forceinline__ void StoreSum(const GemvOut& o, int n, int64_t row, float v) {
  if (o.mode == OutMode::kBf16) {
    o.bf16[n * o.stride + row] = __float2bfloat16_rn(v);
  } else {
    float* d = o.f32 + n * o.stride + row;
    const float base = o.zero_base ? 0.0f : LdCgF32(d);
    *d = base + v;
  }
}
__device__ __forceinline__ void StoreSwiGlu(const GemvOut& o, int n, int64_t row, float gate,
                                            float up) {
  const float g = __bfloat162float(__float2bfloat16_rn(gate));
  const float u = __bfloat162float(__float2bfloat16_rn(up));
  o.bf16[n * o.stride + row] = __float2bfloat16_rn(Silu(g) * u);
}

// ---- int tile ----

template <int kBits>
struct TileFmt {
  static constexpr int kChunkK = 256 / kBits;
  static constexpr int kSub = kChunkK / 64;
  static constexpr int kStageBytes = 512 + 256 * kSub;
};
// Chunks a warp's ring of kRing bytes holds.
template <int kBits, int kRing>
inline constexpr int kTileStages = kRing / TileFmt<kBits>::kStageBytes;

// A task's tiles: part 0 = tiles [tile0, tile0 + n), part 1 (gate|up's up) = [tile1, tile1 + n).
struct TileTask {
  const uint8_t* codes;
  const uint32_t* scales;
  int64_t in, ngroups, tile0, tile1;
  int n, parts, nchunks, kw, kw_shift, njobs, group_shift;  // kw = 1 << kw_shift
  bool cluster_tree;
  __device__ int64_t Tile(int job) const {
    const int j = job >> kw_shift;
    return j < n ? tile0 + j : tile1 + (j - n);
  }
};

struct TileCursor {
  int job, c;
  __device__ void Next(const TileTask& s) {
    c += s.kw;
    if (c >= s.nchunks) {
      job += kWarps;
      c = job & (s.kw - 1);
    }
  }
};

// Requests the cursor's chunk (codes + per-subchunk scale words) into the stage at `stage` and
// advances; past the last job it only commits an empty group.
template <int kBits>
__device__ __forceinline__ void IssueTile(const TileTask& s, TileCursor& it, uint32_t stage,
                                          int lane) {
  using F = TileFmt<kBits>;
  if (it.job < s.njobs) {
    const int64_t tile = s.Tile(it.job);
    CpAsyncCg16(stage + lane * 16, s.codes + ((tile * s.nchunks + it.c) * 32 + lane) * 16);
#pragma unroll
    for (int sub = 0; sub < F::kSub; ++sub) {
      const int64_t grp = (int64_t{it.c} * F::kChunkK + 64 * sub) >> s.group_shift;
      CpAsyncCa8(stage + 512 + sub * 256 + lane * 8,
                 s.scales + ((tile * s.ngroups + grp) * 8 + (lane >> 2)) * 2);
    }
    it.Next(s);
  }
  CpAsyncCommitGroup();
}

__device__ __forceinline__ void Mma16816(float c[4], const uint32_t a[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <uint32_t kMask>
__device__ __forceinline__ uint32_t CodePairMasked(uint32_t w, int shift, uint32_t zb) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w >> shift), "r"(kMask), "r"(0x43004300u));
  const __nv_bfloat162 d = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&r),
                                   *reinterpret_cast<const __nv_bfloat162*>(&zb));
  return *reinterpret_cast<const uint32_t*>(&d);
}

// The reference's ChunkMma (gemv_int_tile.cu) with x from shared memory, in two halves: the
// chunk's raw sums per subchunk (ChunkSums: the same mmas in the same order), then their scaling
// into the accumulator (ApplyScales: the same fmas in subchunk order). Split so that a warp can
// run the mma chains of two chunks side by side and still accumulate them in order.
template <int kBits>
__device__ __forceinline__ void ChunkSums(const uint4 q, const uint2 (&sz)[TileFmt<kBits>::kSub],
                                          const __nv_bfloat16* xp,
                                          float (&out)[TileFmt<kBits>::kSub][4]) {
  using F = TileFmt<kBits>;
  const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int s = 0; s < F::kSub; ++s) {
    const uint32_t z0 = sz[s].x >> 16, z1 = sz[s].y >> 16;
    const uint32_t zb0 = 0x43004300u + z0 * 0x00010001u, zb1 = 0x43004300u + z1 * 0x00010001u;
    const uint32_t zb0x4 = 0x43004300u + z0 * 0x00040004u, zb1x4 = 0x43004300u + z1 * 0x00040004u;
    const uint4 xa = *reinterpret_cast<const uint4*>(xp + 64 * s);
    const uint4 xb = *reinterpret_cast<const uint4*>(xp + 64 * s + 8);
    const uint32_t xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sum4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int ii = 0; ii < 4; ++ii) {
      const int i = 4 * s + ii;
      if constexpr (kBits == 4) {
        const uint32_t w = words[i];
        const uint32_t a[4] = {
            CodePairMasked<0x000F000Fu>(w, 0, zb0), CodePairMasked<0x000F000Fu>(w, 4, zb1),
            CodePairMasked<0x000F000Fu>(w, 8, zb0), CodePairMasked<0x000F000Fu>(w, 12, zb1)};
        Mma16816(sum, a, xw[2 * ii], xw[2 * ii + 1]);
      } else if (i % 2 == 0) {
        const uint32_t w = words[i / 2];
        const uint32_t a[4] = {
            CodePairMasked<0x00030003u>(w, 0, zb0), CodePairMasked<0x00030003u>(w, 4, zb1),
            CodePairMasked<0x00030003u>(w, 8, zb0), CodePairMasked<0x00030003u>(w, 12, zb1)};
        Mma16816(sum, a, xw[2 * ii], xw[2 * ii + 1]);
      } else {
        const uint32_t w = words[i / 2];
        const uint32_t a[4] = {
            CodePairMasked<0x000C000Cu>(w, 0, zb0x4), CodePairMasked<0x000C000Cu>(w, 4, zb1x4),
            CodePairMasked<0x000C000Cu>(w, 8, zb0x4), CodePairMasked<0x000C000Cu>(w, 12, zb1x4)};
        Mma16816(sum4, a, xw[2 * ii], xw[2 * ii + 1]);
      }
    }
    if constexpr (kBits == 2) {
#pragma unroll
      for (int e = 0; e < 4; ++e) sum[e] = fmaf(0.25f, sum4[e], sum[e]);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) out[s][e] = sum[e];
  }
}
template <int kBits>
__device__ __forceinline__ void ApplyScales(const float (&sums)[TileFmt<kBits>::kSub][4],
                                            const uint2 (&sz)[TileFmt<kBits>::kSub], float acc[4]) {
#pragma unroll
  for (int s = 0; s < TileFmt<kBits>::kSub; ++s) {
    const float s0 = wo::F16BitsToFloat(static_cast<uint16_t>(sz[s].x & 0xFFFFu));
    const float s1 = wo::F16BitsToFloat(static_cast<uint16_t>(sz[s].y & 0xFFFFu));
    acc[0] = fmaf(s0, sums[s][0], acc[0]);
    acc[1] = fmaf(s0, sums[s][1], acc[1]);
    acc[2] = fmaf(s1, sums[s][2], acc[2]);
    acc[3] = fmaf(s1, sums[s][3], acc[3]);
  }
}

// Fills this warp's ring with its first chunks (before the task waits: weights only).
template <int kBits, int kRing>
__device__ __forceinline__ TileCursor PrimeTile(const TileTask& s, unsigned char* ring) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  TileCursor it{warp, warp & (s.kw - 1)};
  const uint32_t base = SmemAddr32(ring);
#pragma unroll
  for (int st = 0; st < kTileStages<kBits, kRing>; ++st) {
    IssueTile<kBits>(s, it, base + st * TileFmt<kBits>::kStageBytes, lane);
  }
  return it;
}

// A stage's chunk as this lane holds it: codes and per-subchunk scale words.
template <int kBits>
struct LaneChunk {
  uint4 q;
  uint2 sz[TileFmt<kBits>::kSub];
  __device__ __forceinline__ void Load(const unsigned char* stage, int lane) {
    q = *reinterpret_cast<const uint4*>(stage + lane * 16);
#pragma unroll
    for (int sub = 0; sub < TileFmt<kBits>::kSub; ++sub) {
      sz[sub] = *reinterpret_cast<const uint2*>(stage + 512 + sub * 256 + lane * 8);
    }
  }
};

__device__ __forceinline__ void FlushJob(float* red, int job, int lane, float acc[4]) {
  *reinterpret_cast<float4*>(red + (job * 32 + lane) * 4) =
      make_float4(acc[0], acc[1], acc[2], acc[3]);
  acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
}

// Streams this warp's jobs, two chunks a round (their mma chains independent, their sums added
// in chunk order, so the bits are the one-chunk loop's); each job's sums land in red[job]
// (32 lanes x 4 floats).
template <int kBits, int kRing>
__device__ void RunTileJobs(const TileTask& s, TileCursor issue, unsigned char* ring,
                            const __nv_bfloat16* xs, int m, float* red) {
  using F = TileFmt<kBits>;
  constexpr int kStages = kTileStages<kBits, kRing>;
  static_assert(kStages >= 2, "two chunks a round need two stages");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const uint32_t base = SmemAddr32(ring);
  const __nv_bfloat16* xrow = xs + int64_t{g < m ? g : 0} * s.in + 16 * t;
  TileCursor cur{warp, warp & (s.kw - 1)};
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int st = 0;
  while (cur.job < s.njobs) {
    CpAsyncWaitGroup<kStages - 2>();
    const int st1 = st + 1 == kStages ? 0 : st + 1;
    // Only this lane's own cp.async wrote these bytes: no warp barrier before the refill.
    LaneChunk<kBits> a, b;
    a.Load(ring + st * F::kStageBytes, lane);
    b.Load(ring + st1 * F::kStageBytes, lane);
    IssueTile<kBits>(s, issue, base + st * F::kStageBytes, lane);
    IssueTile<kBits>(s, issue, base + st1 * F::kStageBytes, lane);
    st = st1 + 1 == kStages ? 0 : st1 + 1;
    const TileCursor ca = cur;
    cur.Next(s);
    const TileCursor cb = cur;
    const bool has_b = cb.job < s.njobs;
    if (has_b) cur.Next(s);
    float sa[F::kSub][4], sb[F::kSub][4];
    ChunkSums<kBits>(a.q, a.sz, xrow + int64_t{ca.c} * F::kChunkK, sa);
    ChunkSums<kBits>(b.q, b.sz, xrow + int64_t{cb.c} * F::kChunkK, sb);  // unused if !has_b
    ApplyScales<kBits>(sa, a.sz, acc);
    if (cb.job != ca.job) FlushJob(red, ca.job, lane, acc);
    if (has_b) {
      ApplyScales<kBits>(sb, b.sz, acc);
      if (cur.job != cb.job) FlushJob(red, cb.job, lane, acc);
    }
  }
  CpAsyncWaitGroup<0>();
}

// Tile j's KW partial sums (jobs j * KW ..) met in the reference's order.
__device__ __forceinline__ void TileSum(const TileTask& s, const float* red, int j, int lane,
                                        float acc[4]) {
  const float* b = red + (int64_t{j} * s.kw * 32 + lane) * 4;
  const int groups = s.cluster_tree ? 4 : 1, per = s.kw / groups;
  for (int r = 0; r < groups; ++r) {
    float part[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) part[e] = b[(r * per) * 128 + e];
    for (int k = 1; k < per; ++k) {
#pragma unroll
      for (int e = 0; e < 4; ++e) part[e] += b[(r * per + k) * 128 + e];
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[e] = r == 0 ? part[e] : acc[e] + part[e];
  }
}

// After RunTileJobs and a barrier: each warp sums tiles w, w + 8, ... and stores their rows
// (lane (g, t): rows g, g + 8 x columns 2t, 2t + 1, as StoreTileOutputs). Rows are relative to
// part 0's matrix; `row_end` bounds them.
__device__ void StoreTiles(const TileTask& s, const float* red, int m, int64_t row_end,
                           const GemvOut& o) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  for (int j = warp; j < s.n; j += kWarps) {
    float acc[4], up[4];
    TileSum(s, red, j, lane, acc);
    if (o.mode == OutMode::kSwiGlu) TileSum(s, red, j + s.n, lane, up);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int n = 2 * t + (e & 1);
      const int64_t row = (s.tile0 + j) * 16 + g + 8 * (e >> 1);
      if (n >= m || row >= row_end) continue;
      if (o.mode == OutMode::kSwiGlu) {
        StoreSwiGlu(o, n, row, acc[e], up[e]);
      } else {
        StoreSum(o, n, row, acc[e]);
      }
    }
  }
}

// ---- bf16 ----

template <int kRing>
inline constexpr int kBf16Stages = kRing / 512;

// A task's rows: pair p (p = warp, warp + 8, ...) is row0 + p, then (gate|up) row1 + p.
struct Bf16Task {
  const uint8_t* data;
  int64_t in, row0, row1;
  int n, parts, units, nch;
};
struct Bf16Cursor {
  int p, part, k;
  __device__ void Next(const Bf16Task& s) {
    if (++k < s.nch) return;
    k = 0;
    if (++part < s.parts) return;
    part = 0;
    p += kWarps;
  }
};

__device__ __forceinline__ void IssueBf16(const Bf16Task& s, Bf16Cursor& it, uint32_t stage,
                                          int lane) {
  if (it.p < s.n) {
    const int u = 32 * it.k + lane;
    const int64_t row = (it.part == 0 ? s.row0 : s.row1) + it.p;
    if (u < s.units) CpAsyncCg16(stage + lane * 16, s.data + row * s.in * 2 + int64_t{u} * 16);
    it.Next(s);
  }
  CpAsyncCommitGroup();
}

template <int kRing>
__device__ __forceinline__ Bf16Cursor PrimeBf16(const Bf16Task& s, unsigned char* ring) {
  const int lane = threadIdx.x & 31;
  Bf16Cursor it{static_cast<int>(threadIdx.x >> 5), 0, 0};
  const uint32_t base = SmemAddr32(ring);
#pragma unroll
  for (int st = 0; st < kBf16Stages<kRing>; ++st) IssueBf16(s, it, base + st * 512, lane);
  return it;
}

// M >= rows accumulators (M in 1, 2, 4, 8); rows past `rows` are computed, never stored.
template <int M, int kRing>
__device__ void RunBf16RowsM(const Bf16Task& s, Bf16Cursor issue, unsigned char* ring,
                             const __nv_bfloat16* xs, int rows, const GemvOut& o) {
  const int lane = threadIdx.x & 31;
  const uint32_t base = SmemAddr32(ring);
  Bf16Cursor cur{static_cast<int>(threadIdx.x >> 5), 0, 0};
  float acc[M], gate[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = gate[m] = 0.0f;
  int st = 0;
  while (cur.p < s.n) {
    CpAsyncWaitGroup<kBf16Stages<kRing> - 1>();
    const uint4 raw = *reinterpret_cast<const uint4*>(ring + st * 512 + lane * 16);
    IssueBf16(s, issue, base + st * 512, lane);
    st = st + 1 == kBf16Stages<kRing> ? 0 : st + 1;
    const int u = 32 * cur.k + lane;
    if (u < s.units) {
      const uint32_t q[4] = {raw.x, raw.y, raw.z, raw.w};
      float w[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        w[2 * i] = __uint_as_float(q[i] << 16);
        w[2 * i + 1] = __uint_as_float(q[i] & 0xFFFF0000u);
      }
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const int xm = m < rows ? m : 0;
        const uint4 xu = *reinterpret_cast<const uint4*>(xs + xm * s.in + int64_t{u} * 8);
        const uint32_t xw[4] = {xu.x, xu.y, xu.z, xu.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          acc[m] = fmaf(w[2 * i], __uint_as_float(xw[i] << 16), acc[m]);
          acc[m] = fmaf(w[2 * i + 1], __uint_as_float(xw[i] & 0xFFFF0000u), acc[m]);
        }
      }
    }
    const Bf16Cursor was = cur;
    cur.Next(s);
    if (was.k + 1 < s.nch) continue;  // the row goes on
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float v = acc[m];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      acc[m] = 0.0f;
      if (m >= rows) continue;
      if (o.mode == OutMode::kSwiGlu) {
        if (was.part == 0) {
          gate[m] = v;
        } else if (lane == 0) {
          StoreSwiGlu(o, m, s.row0 + was.p, gate[m], v);
        }
      } else if (lane == 0) {
        StoreSum(o, m, s.row0 + was.p, v);
      }
    }
  }
  CpAsyncWaitGroup<0>();
}

template <int kRing>
__device__ __forceinline__ void RunBf16Rows(const Bf16Task& s, Bf16Cursor issue,
                                            unsigned char* ring, const __nv_bfloat16* xs, int m,
                                            const GemvOut& o) {
  switch (m) {
    case 1:
      return RunBf16RowsM<1, kRing>(s, issue, ring, xs, m, o);
    case 2:
      return RunBf16RowsM<2, kRing>(s, issue, ring, xs, m, o);
    case 3:
    case 4:
      return RunBf16RowsM<4, kRing>(s, issue, ring, xs, m, o);
    default:
      return RunBf16RowsM<8, kRing>(s, issue, ring, xs, m, o);
  }
}

}  // namespace dq::cuda::pd
