// Tensor-core decode GEMV for int4 / int2 weights with groups of 64 or 128 (IntTileLayout), and
// the dequantization of that layout.
//
// The weights are the A operand of mma.sync m16n8k16 (16 output rows x 16 inputs per mma) and the
// m <= 8 activation rows are the B operand's 8 columns, so one mma consumes 256 weights and a
// batch of up to 8 costs nothing extra. Codes are repacked at upload (RepackIntTile in
// weight_only.cu) into tiles of 16 rows; a tile is a run of 512-byte chunks, one 16-byte load per
// lane, each lane's 16 bytes holding exactly its A fragments for the chunk's 4 (int4) or 8 (int2)
// mmas. Inside a chunk the inputs are permuted so that lane t's B fragments are 16 consecutive
// inputs per 64-input subchunk (two 16-byte loads of x). Each code pair becomes a bf16x2 of
// (q - z) with a shift, one lop3 (the codes ORed into the mantissa of bf16 128.0) and one packed
// subtraction of 128 + z: exact small integers, so the mma's fp32 sums of (q - z)·x are exact
// products; the group scale multiplies each subchunk's sum once (a reordering of the fp32 sums of
// the CPU reference's (q - z)·s·x).
//
// A CTA is 8 warps (16 for matrices with few tiles and long rows); KW of them share a tile, each
// streaming every KW-th chunk through its own cp.async ring; partial sums meet in shared memory.
// The ring's first chunks are requested before griddepcontrol.wait, so the weight stream starts
// while the previous kernel drains.
#include <cooperative_groups.h>

#include "engine/cuda/weight_only_kernels.cuh"

namespace dq::cuda::wo {
namespace {

namespace cg = cooperative_groups;

constexpr int kTileWarps = 8;

__device__ __forceinline__ void Mma16816(float c[4], const uint32_t a[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

struct TileParams {
  const uint8_t* codes = nullptr;
  const uint32_t* scales = nullptr;  // [tile][group][8][2]: f16 scale bits | zero << 16
  const __nv_bfloat16* x = nullptr;
  __nv_bfloat16* y = nullptr;
  float* y_acc = nullptr;
  int64_t out = 0;
  int64_t in = 0;
  int64_t tiles = 0;
  int m = 1;
  int group_shift = 0;
  int kw_shift = 0;  // log2(warps per tile)
};

template <int kBits>
struct TileShape {
  static constexpr int kChunkK = IntTileChunkK(kBits);
  static constexpr int kSub = kChunkK / 64;  // 64-input subchunks per chunk
};

// One chunk's codes and per-subchunk (scale, zero) words for rows g and g + 8.
template <int kBits>
struct TileChunk {
  uint4 q;
  uint2 sz[TileShape<kBits>::kSub];
};

template <int kBits>
__device__ __forceinline__ void LoadTileChunk(const TileParams& p, int64_t tile, int c, int lane,
                                              bool valid, TileChunk<kBits>& d) {
  using S = TileShape<kBits>;
  if (!valid) {
    d.q = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int s = 0; s < S::kSub; ++s) d.sz[s] = make_uint2(0, 0);
    return;
  }
  const int64_t nchunks = p.in / S::kChunkK, ngroups = p.in >> p.group_shift;
  d.q = LoadStream16(p.codes + ((tile * nchunks + c) * 32 + lane) * 16);
#pragma unroll
  for (int s = 0; s < S::kSub; ++s) {
    const int64_t grp = (int64_t{c} * S::kChunkK + 64 * s) >> p.group_shift;
    d.sz[s] = __ldg(
        reinterpret_cast<const uint2*>(p.scales + ((tile * ngroups + grp) * 8 + (lane >> 2)) * 2));
  }
}

// Writes (or accumulates) a tile's sums: lane (g, t) holds rows g, g + 8 x columns 2t, 2t + 1.
__device__ __forceinline__ void StoreTileOutputs(const TileParams& p, int64_t tile, int lane,
                                                 const float acc[4]) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int n = 2 * t + (e & 1);
    const int64_t row = tile * 16 + g + 8 * (e >> 1);
    if (n >= p.m || row >= p.out) continue;
    const int64_t idx = int64_t{n} * p.out + row;
    if (p.y_acc != nullptr) {
      p.y_acc[idx] += acc[e];
    } else {
      p.y[idx] = __float2bfloat16_rn(acc[e]);
    }
  }
}

// The GEMV kernel. Each warp streams its chunks through a private cp.async ring of kStages chunks
// in shared memory (codes + scale words), so it keeps kStages chunks in flight without holding
// them in registers (on the H200 this beat a register double buffer of 2 x 4 chunks: int4 g128
// Qwen3-4B decode 459 vs 416 tok/s at batch 1). The kernel is bound by instruction issue, not by
// bytes, so the loop is written for few instructions per chunk: each lane reads back only the
// bytes its own cp.async wrote (no warp barrier), the ring is unrolled by stage so every shared
// address is a constant offset, and the next chunk's global addresses are running 64-bit
// pointers bumped by a 32-bit step.
template <int kBits>
struct RingLayout {
  static constexpr int kScaleBytes = 32 * 8 * TileShape<kBits>::kSub;
  static constexpr int kStageBytes = 512 + kScaleBytes;
};
template <int kBits, int kStages, int kWarps>
constexpr int RingSmemBytes() {
  return kWarps * kStages * RingLayout<kBits>::kStageBytes;
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

// One warp's stream over its chunks kw, kw + kw_n, ... of one tile, seen by one lane: where the
// next chunk to request comes from and where this lane's bytes sit in the ring.
template <int kBits>
struct LaneStream {
  using S = TileShape<kBits>;
  const uint8_t* code;     // this lane's 16 bytes of the next chunk to request
  const uint32_t* scales;  // this lane's (row g, g + 8) scale words of group 0 of the tile
  int next_chunk;          // index of the next chunk to request
  int chunk_step;          // kw_n
  int group_shift;
  uint32_t code_step;   // bytes between this warp's chunks: kw_n * 512
  uint32_t slot;        // shared address of this lane's code bytes in stage 0
  uint32_t scale_slot;  // ... and of its subchunk-0 scale words

  // Requests the next chunk into stage `st` and advances.
  __device__ __forceinline__ void Issue(int st) {
    constexpr int kStage = RingLayout<kBits>::kStageBytes;
    CpAsyncCg16(slot + st * kStage, code);
#pragma unroll
    for (int s = 0; s < S::kSub; ++s) {
      // Byte offset of the group's scale words: 64 bytes (16 rows x u32) per group.
      const uint32_t grp_bytes =
          ((static_cast<uint32_t>(next_chunk * S::kChunkK + 64 * s) >> group_shift) << 6);
      CpAsyncCa8(scale_slot + st * kStage + s * 256,
                 reinterpret_cast<const uint8_t*>(scales) + grp_bytes);
    }
    code += code_step;
    next_chunk += chunk_step;
  }
};

// bf16x2 of (q_lo - z, q_hi - z) · f for the codes under kMask (one field at bit b and one at
// 16 + b, f = 2^b) of w >> shift: one lop3 ORs them into the mantissa of bf16 128.0, one packed
// subtraction removes zb = bf16x2 (128 + f z). Exact small integers.
template <uint32_t kMask>
__device__ __forceinline__ uint32_t CodePairMasked(uint32_t w, int shift, uint32_t zb) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w >> shift), "r"(kMask), "r"(0x43004300u));
  const __nv_bfloat162 d = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&r),
                                   *reinterpret_cast<const __nv_bfloat162*>(&zb));
  return *reinterpret_cast<const uint32_t*>(&d);
}

// acc (rows g, g + 8 x columns 2t, 2t + 1) += one chunk's scaled mma sums; xp: this lane's x
// (column g, or a valid column's when g >= m: those mma columns are computed and never stored)
// at the chunk's first input + 16 t.
//
// Code pairs sit 4 bits apart in both widths (IntTileCodePos). int4: mma i's pairs are word i's
// nibbles (shifts 0, 4, 8, 12). int2: mmas 2j and 2j + 1 share word j; the even one takes the
// 2-bit fields at bits 0, 4, 8, 12 (mask 3 after the shift), the odd one those at 2, 6, 10, 14
// in place (mask 0xC: values 4 (q - z)), so the 8 pairs of a word need 3 shifts, not 7; the
// odd mmas sum into their own accumulator, scaled by 1/4 (exact) at the end.
template <int kBits>
__device__ __forceinline__ void ChunkMma(const uint4 q, const uint2 (&sz)[TileShape<kBits>::kSub],
                                         const __nv_bfloat16* xp, float acc[4]) {
  using S = TileShape<kBits>;
  const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int s = 0; s < S::kSub; ++s) {
    const uint32_t z0 = sz[s].x >> 16, z1 = sz[s].y >> 16;
    const uint32_t zb0 = 0x43004300u + z0 * 0x00010001u, zb1 = 0x43004300u + z1 * 0x00010001u;
    const uint32_t zb0x4 = 0x43004300u + z0 * 0x00040004u, zb1x4 = 0x43004300u + z1 * 0x00040004u;
    const uint4 xa = __ldg(reinterpret_cast<const uint4*>(xp + 64 * s));
    const uint4 xb = __ldg(reinterpret_cast<const uint4*>(xp + 64 * s + 8));
    const uint32_t xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sum4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int ii = 0; ii < 4; ++ii) {
      const int i = 4 * s + ii;  // mma of the chunk
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
    const float s0 = F16BitsToFloat(static_cast<uint16_t>(sz[s].x & 0xFFFFu));
    const float s1 = F16BitsToFloat(static_cast<uint16_t>(sz[s].y & 0xFFFFu));
    acc[0] = fmaf(s0, sum[0], acc[0]);
    acc[1] = fmaf(s0, sum[1], acc[1]);
    acc[2] = fmaf(s1, sum[2], acc[2]);
    acc[3] = fmaf(s1, sum[3], acc[3]);
  }
}

// One warp's part of a tile: its chunks kw, kw + kw_n, ... (n_my of them) streamed through its
// kStages-deep ring at `ring_smem` (this warp's), summed into acc. Waits for the previous kernel
// (griddepcontrol.wait) after requesting its first chunks.
template <int kBits, int kStages>
__device__ __forceinline__ void StreamTileChunks(const TileParams& p, int64_t tile, int kw,
                                                 int kw_n, int n_my, unsigned char* ring_smem,
                                                 float acc[4]) {
  using S = TileShape<kBits>;
  using L = RingLayout<kBits>;
  const int lane = threadIdx.x & 31;
  const int nchunks = static_cast<int>(p.in / S::kChunkK);
  const int64_t ngroups = p.in >> p.group_shift;
  const uint32_t warp_ring = static_cast<uint32_t>(__cvta_generic_to_shared(ring_smem));
  LaneStream<kBits> in;
  in.code = p.codes + ((tile * nchunks + kw) * 32 + lane) * 16;
  in.scales = p.scales + (tile * ngroups * 8 + (lane >> 2)) * 2;
  in.next_chunk = kw;
  in.chunk_step = kw_n;
  in.group_shift = p.group_shift;
  in.code_step = static_cast<uint32_t>(kw_n) * 512u;
  in.slot = warp_ring + lane * 16;
  in.scale_slot = warp_ring + 512 + lane * 8;
#pragma unroll
  for (int st = 0; st < kStages; ++st) {
    if (st < n_my) in.Issue(st);
    CpAsyncCommitGroup();
  }
  GridDepWait();
  const int g = lane >> 2, t = lane & 3;
  // This lane's x (column g): the first chunk's inputs 16 t.., then kw_n chunks further each time.
  const __nv_bfloat16* xp =
      p.x + int64_t{g < p.m ? g : 0} * p.in + int64_t{kw} * S::kChunkK + 16 * t;
  const int x_step = kw_n * S::kChunkK;
  const unsigned char* lane_code = ring_smem + lane * 16;
  const unsigned char* lane_scale = ring_smem + 512 + lane * 8;
  for (int i0 = 0; i0 < n_my; i0 += kStages) {
#pragma unroll
    for (int st = 0; st < kStages; ++st) {
      const int i = i0 + st;
      if (i >= n_my) break;
      CpAsyncWaitGroup<kStages - 1>();
      // Only this lane's own cp.async wrote these bytes, so no warp barrier is needed, and the
      // stage may be refilled right after the reads below (program order).
      const uint4 q = *reinterpret_cast<const uint4*>(lane_code + st * L::kStageBytes);
      uint2 sz[S::kSub];
#pragma unroll
      for (int s = 0; s < S::kSub; ++s) {
        sz[s] = *reinterpret_cast<const uint2*>(lane_scale + st * L::kStageBytes + s * 256);
      }
      if (i + kStages < n_my) in.Issue(st);
      CpAsyncCommitGroup();
      ChunkMma<kBits>(q, sz, xp, acc);
      xp += x_step;
    }
  }
  CpAsyncWaitGroup<0>();
}

template <int kBits, int kStages, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) IntTileRingKernel(const TileParams p) {
  using S = TileShape<kBits>;
  using L = RingLayout<kBits>;
  extern __shared__ __align__(16) unsigned char ring_smem[];
  GridDepLaunch();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kw_n = 1 << p.kw_shift, kw = warp & (kw_n - 1);
  const int64_t tile = int64_t{blockIdx.x} * (kWarps >> p.kw_shift) + (warp >> p.kw_shift);
  const bool live = tile < p.tiles;
  const int nchunks = static_cast<int>(p.in / S::kChunkK);
  const int n_my = live && kw < nchunks ? (nchunks - kw + kw_n - 1) / kw_n : 0;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  StreamTileChunks<kBits, kStages>(p, live ? tile : 0, kw, kw_n, n_my,
                                   ring_smem + warp * kStages * L::kStageBytes, acc);
  __shared__ float red[kWarps][32][4];
#pragma unroll
  for (int e = 0; e < 4; ++e) red[warp][lane][e] = acc[e];
  __syncthreads();
  if (kw != 0 || !live) return;
  for (int k = 1; k < kw_n; ++k) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[e] += red[warp + k][lane][e];
  }
  StoreTileOutputs(p, tile, lane, acc);
}

// For matrices with few tiles (Qwen3-4B's o and down: 160 tiles of 16 rows for 132 SMs): one
// tile per cluster of kCluster CTAs of kWarps warps, each CTA on its own SM streaming every
// (kCluster x kWarps)-th chunk. With one 16-warp CTA per tile, 28 SMs got two tiles and the
// kernel took twice a tile's time; small CTAs spread the tiles' chunks evenly. The CTAs' sums
// meet through distributed shared memory in rank order (deterministic, no atomics).
template <int kBits, int kStages, int kWarps, int kCluster>
__global__ void __launch_bounds__(kWarps * 32) IntTileClusterKernel(const TileParams p) {
  using S = TileShape<kBits>;
  using L = RingLayout<kBits>;
  extern __shared__ __align__(16) unsigned char ring_smem[];
  __shared__ float red[kWarps][32][4];
  GridDepLaunch();
  cg::cluster_group cluster = cg::this_cluster();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t tile = blockIdx.x / kCluster;
  const int kw = rank * kWarps + warp, kw_n = kCluster * kWarps;
  const int nchunks = static_cast<int>(p.in / S::kChunkK);
  const int n_my = kw < nchunks ? (nchunks - kw + kw_n - 1) / kw_n : 0;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  StreamTileChunks<kBits, kStages>(p, tile, kw, kw_n, n_my,
                                   ring_smem + warp * kStages * L::kStageBytes, acc);
#pragma unroll
  for (int e = 0; e < 4; ++e) red[warp][lane][e] = acc[e];
  __syncthreads();
  if (warp == 0) {
    for (int k = 1; k < kWarps; ++k) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] += red[k][lane][e];
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) red[0][lane][e] = acc[e];
  }
  cluster.sync();  // every CTA's sum is in its red[0]
  if (rank == 0 && warp == 0) {
    for (int r = 1; r < kCluster; ++r) {
      const float* peer = cluster.map_shared_rank(&red[0][0][0], r);
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] += peer[lane * 4 + e];
    }
    StoreTileOutputs(p, tile, lane, acc);
  }
  cluster.sync();  // keep each CTA's shared memory alive until rank 0 has read it
}

// One thread per (tile, chunk, lane): its 16 inputs per subchunk of rows g and g + 8, written as
// bf16 with the CPU reference's rounding (float(q - z) * s, one product).
template <int kBits>
__global__ void IntTileDequantKernel(const TileParams p, __nv_bfloat16* out) {
  using S = TileShape<kBits>;
  const int64_t nchunks = p.in / S::kChunkK;
  const int64_t id = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (id >= p.tiles * nchunks * 32) return;
  const int lane = static_cast<int>(id % 32);
  const int c = static_cast<int>((id / 32) % nchunks);
  const int64_t tile = id / 32 / nchunks;
  TileChunk<kBits> d;
  LoadTileChunk<kBits>(p, tile, c, lane, true, d);
  const int g = lane >> 2, t = lane & 3;
  const uint32_t words[4] = {d.q.x, d.q.y, d.q.z, d.q.w};
  constexpr uint32_t kMask = (1u << kBits) - 1;
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const int64_t row = tile * 16 + g + 8 * hi;
    if (row >= p.out) continue;
#pragma unroll
    for (int s = 0; s < S::kSub; ++s) {
      const uint32_t sz = hi ? d.sz[s].y : d.sz[s].x;
      const float scale = F16BitsToFloat(static_cast<uint16_t>(sz & 0xFFFFu));
      const uint32_t z = sz >> 16;
      uint32_t packed[8];
#pragma unroll
      for (int ii = 0; ii < 4; ++ii) {
        const int i = 4 * s + ii;
        const uint32_t w = kBits == 4 ? words[i] : words[i / 2];
        const int base = kBits == 4 ? 0 : 2 * (i % 2);
        float v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int pair = 2 * (j >> 1) + hi;
          const uint32_t q = (w >> (base + 4 * pair + 16 * (j & 1))) & kMask;
          v[j] = __fmul_rn(IntDiff(q, z), scale);
        }
        const __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]);
        const __nv_bfloat162 hi2 = __floats2bfloat162_rn(v[2], v[3]);
        packed[2 * ii] = *reinterpret_cast<const uint32_t*>(&lo);
        packed[2 * ii + 1] = *reinterpret_cast<const uint32_t*>(&hi2);
      }
      uint4* dst =
          reinterpret_cast<uint4*>(out + row * p.in + int64_t{c} * S::kChunkK + 64 * s + 16 * t);
      dst[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
      dst[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
    }
  }
}

// Warps per tile: the fewest (longest chunk runs per warp) that still give `ctas_per_sm` CTAs
// per SM (IntTileOptions::ctas_per_sm).
int WarpsPerTileShift(int64_t tiles, int64_t nchunks, int ctas_per_sm) {
  const int64_t want = ctas_per_sm * int64_t{SmCount()};
  for (int shift = 0; shift < 3; ++shift) {
    const int64_t per_cta = kTileWarps >> shift;
    if ((tiles + per_cta - 1) / per_cta >= want && nchunks >= (1 << shift)) return shift;
  }
  return nchunks >= 8 ? 3 : (nchunks >= 4 ? 2 : (nchunks >= 2 ? 1 : 0));
}

template <int kBits, int kStages, int kWarps>
void LaunchRing(const TileParams& p, dim3 grid, cudaStream_t stream) {
  constexpr int kSmem = RingSmemBytes<kBits, kStages, kWarps>();
  static const bool attr = [] {
    CUDA_CHECK(cudaFuncSetAttribute(IntTileRingKernel<kBits, kStages, kWarps>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)attr;
  detail::LaunchPdl(IntTileRingKernel<kBits, kStages, kWarps>, grid, dim3(kWarps * 32), kSmem,
                    stream, p);
}

template <int kBits, int kStages, int kWarps, int kCluster>
void LaunchCluster(const TileParams& p, cudaStream_t stream) {
  constexpr int kSmem = RingSmemBytes<kBits, kStages, kWarps>();
  auto kernel = IntTileClusterKernel<kBits, kStages, kWarps, kCluster>;
  static const bool attr = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)attr;
  detail::LaunchPdlCluster(kernel, dim3(static_cast<unsigned>(p.tiles * kCluster)),
                           dim3(kWarps * 32), kSmem, kCluster, stream, p);
}

template <int kBits>
void RunIntTile(const GemvParams& gp, int m, __nv_bfloat16* dequant_out, cudaStream_t stream) {
  TileParams p;
  p.codes = gp.codes;
  p.scales = reinterpret_cast<const uint32_t*>(gp.scales);
  p.x = gp.x;
  p.y = gp.y;
  p.y_acc = gp.y_acc;
  p.out = gp.out;
  p.in = gp.in;
  p.tiles = (gp.out + 15) / 16;
  p.m = m;
  p.group_shift = gp.group_shift;
  const int64_t nchunks = gp.in / TileShape<kBits>::kChunkK;
  if (dequant_out != nullptr) {
    const int64_t threads = p.tiles * nchunks * 32;
    IntTileDequantKernel<kBits>
        <<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(p, dequant_out);
    CUDA_CHECK_LAUNCH();
    return;
  }
  constexpr int kStages = kBits == 4 ? 8 : 6;
  // Few tiles (out = 2560: Qwen3-4B's o and down) and long rows: 16 warps on each tile, as a
  // cluster of 4 CTAs of 4 warps (IntTileOptions::cluster, the default), so that the rows' bytes
  // spread evenly over every SM, or as one 16-warp CTA.
  if (p.tiles < 2 * int64_t{SmCount()} && nchunks >= 16) {
    if (gp.int_tile.cluster) return LaunchCluster<kBits, kStages, 4, 4>(p, stream);
    p.kw_shift = 4;
    return LaunchRing<kBits, kStages, 16>(p, dim3(static_cast<unsigned>(p.tiles)), stream);
  }
  p.kw_shift = WarpsPerTileShift(p.tiles, nchunks, gp.int_tile.ctas_per_sm);
  const int64_t per_cta = kTileWarps >> p.kw_shift;
  LaunchRing<kBits, kStages, kTileWarps>(
      p, dim3(static_cast<unsigned>((p.tiles + per_cta - 1) / per_cta)), stream);
}

}  // namespace

bool LaunchIntTile(int bits, const GemvParams& p, int m, __nv_bfloat16* dequant_out,
                   cudaStream_t stream) {
  if (!IntTileLayout(bits, 1 << p.group_shift, p.in)) return false;
  if (bits == 4) {
    RunIntTile<4>(p, m, dequant_out, stream);
  } else {
    RunIntTile<2>(p, m, dequant_out, stream);
  }
  return true;
}

}  // namespace dq::cuda::wo
