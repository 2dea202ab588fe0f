// Warp-specialized causal prefill attention for Hopper (FlashAttention-3's schedule on our paged
// cache): one producer warpgroup streams K and V tiles from the block table into a ring of
// shared-memory stages with cp.async; two consumer warpgroups (64 query rows each) run the wgmma
// GEMMs and the online softmax. Each consumer overlaps its own work: it issues S_j = Q K_j^T and
// O += P_{j-1} V_{j-1} together and does tile j's softmax while the second GEMM runs; with
// ping-pong, the two consumers also take turns issuing so one's softmax hides behind the other's
// GEMMs. Stages are handed over through mbarriers: "full" (the producer's copies landed) and
// "empty" (every consumer warp is done reading).
#include <cmath>

#include "engine/cuda/attention_prefill_ws.h"
#include "engine/cuda/attention_tile.cuh"
#include "engine/cuda/attention_wgmma.cuh"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/mbarrier.cuh"

namespace dq::cuda {
namespace {

using attn::CpAsync16;
using attn::SwzOffset;

constexpr int kBlockM = 128;  // query rows per block: 2 consumer warpgroups x 64
constexpr int kThreads = 384;
constexpr int kConsumerThreads = 256;
constexpr int kConsumerWarps = 8;

template <int kHeadDim, int kBlockN, int kStages>
struct Layout {
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kTileBytes = kBlockN * kHeadDim * 2;
  static constexpr int kK = kQBytes;                       // K stages
  static constexpr int kV = kK + kStages * kTileBytes;     // V stages
  static constexpr int kBars = kV + kStages * kTileBytes;  // mbarriers, 8 bytes each
  static constexpr int kQFull = 0, kFullK = 1, kFullV = kFullK + kStages;
  static constexpr int kEmptyK = kFullV + kStages, kEmptyV = kEmptyK + kStages;
  static constexpr int kNumBars = kEmptyV + kStages;
  static constexpr int kSmem = 1024 + kBars + kNumBars * 8;  // + slack to align to 1024
};

// What every thread of a block knows about its tile of queries.
struct BlockWork {
  int q_begin, m0, rows, prefix, n_keys, n_tiles, kvh, shift;
  const int32_t* table;
};

// Issues cp.async for one K or V tile (positions kt * kBlockN + r) with the producer's 128 threads.
template <int kHeadDim, int kBlockN>
__device__ __forceinline__ void LoadTile(uint32_t dst, const __nv_bfloat16* base,
                                         const KvCacheLayer& c, const BlockWork& w, int kt) {
  constexpr int kChunks = kHeadDim / 8, kRowsPerPass = 128 / kChunks;
  const int ch = threadIdx.x % kChunks, r0 = threadIdx.x / kChunks;
  const int64_t stride = c.token_stride();
#pragma unroll
  for (int i = 0; i < kBlockN / kRowsPerPass; ++i) {
    const int r = r0 + i * kRowsPerPass, pos = kt * kBlockN + r;
    const bool valid = pos < w.n_keys;
    const int64_t slot = attn::SlotOf(w.table, valid ? pos : 0, c.block_size, w.shift);
    CpAsync16(dst + SwzOffset<kBlockN>(r, ch), base + slot * stride + w.kvh * kHeadDim + ch * 8,
              valid);
  }
}

// The producer: loads Q, then K_0, V_0, K_1, V_1, ... into the ring. Each load's "full" barrier
// gets one arrival per producer thread once that thread's copies landed (cp.async arrive, so the
// producer never stalls on its own loads: only on a stage not yet released). cp.async writes
// through the generic proxy; consumers fence to the async proxy after the wait, before wgmma.
template <int kHeadDim, int kBlockN, int kStages>
__device__ void Produce(const PrefillAttentionArgs& a, const KvCacheLayer& c, const BlockWork& w,
                        uint32_t base, int h) {
  using L = Layout<kHeadDim, kBlockN, kStages>;
  const auto bar = [&](int i) { return base + L::kBars + 8 * i; };
  {
    constexpr int kChunks = kHeadDim / 8, kRowsPerPass = 128 / kChunks;
    const int ch = threadIdx.x % kChunks, r0 = threadIdx.x / kChunks;
#pragma unroll 4
    for (int i = 0; i < kBlockM / kRowsPerPass; ++i) {
      const int r = r0 + i * kRowsPerPass;
      const bool valid = r < w.rows;
      const __nv_bfloat16* src =
          a.q + int64_t{w.q_begin + w.m0 + (valid ? r : 0)} * a.q_stride + h * kHeadDim + ch * 8;
      CpAsync16(base + SwzOffset<kBlockM>(r, ch), src, valid);
    }
    mbar::ArriveOnCpAsync(bar(L::kQFull));
  }
  for (int j = 0; j < w.n_tiles; ++j) {
    const int s = j % kStages;
    const uint32_t empty_parity = ((j / kStages) & 1) ^ 1;
    for (int v = 0; v < 2; ++v) {
      mbar::Wait(bar((v ? L::kEmptyV : L::kEmptyK) + s), empty_parity);
      LoadTile<kHeadDim, kBlockN>(base + (v ? L::kV : L::kK) + s * L::kTileBytes, v ? c.v : c.k, c,
                                  w, j);
      mbar::ArriveOnCpAsync(bar((v ? L::kFullV : L::kFullK) + s));
    }
  }
  attn::CpAsyncWaitAll();
}

using wgmma::WgmmaRS;
using wgmma::WgmmaSS;

// One consumer warpgroup's running softmax state for its 64 rows (2 rows per thread).
template <int kHeadDim, int kBlockN>
struct Softmax {
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

  // Scales and masks S in place, turns it into unnormalized probabilities (relative to the new
  // row maxima) and returns the factors by which the output so far must shrink.
  __device__ __forceinline__ void Step(float (&s)[kBlockN / 2], float scale_log2, bool mask,
                                       int key0, int pos0, float (&alpha)[2]) {
    const int t = threadIdx.x & 3;
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) {
      const int e = i & 3, key = key0 + (i >> 2) * 8 + 2 * t + (e & 1);
      float v = s[i] * scale_log2;
      if (mask && key > pos0 + (e >> 1) * 8) v = -INFINITY;
      s[i] = v;
      tile_max[e >> 1] = fmaxf(tile_max[e >> 1], v);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float m_new = fmaxf(row_max[r], tile_max[r]);  // finite: tile 0 holds key 0
      alpha[r] = exp2f(row_max[r] - m_new);
      row_max[r] = m_new;
      row_sum[r] *= alpha[r];
    }
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) {
      s[i] = exp2f(s[i] - row_max[(i >> 1) & 1]);
      row_sum[(i >> 1) & 1] += s[i];
    }
  }
};

template <int kHeadDim, int kBlockN, int kStages, bool kPingPong>
__device__ void Consume(const PrefillAttentionArgs& a, const BlockWork& w, uint32_t base, int h) {
  using L = Layout<kHeadDim, kBlockN, kStages>;
  constexpr int kSAcc = kBlockN / 2, kOAcc = kHeadDim / 2;
  const auto bar = [&](int i) { return base + L::kBars + 8 * i; };
  const int cw = (threadIdx.x >> 7) - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int wrow = cw * 64 + warp * 16;                   // this warp's first row
  const int pos0 = w.prefix + w.m0 + wrow + (lane >> 2);  // this thread's rows: +0, +8
  const uint32_t q_wg = base + cw * 64 * 128;
  const float scale_log2 = a.scale * attn::kLog2e;
  // Ping-pong turns: consumer cw waits on barrier 2 + cw, then hands the turn to the other.
  const auto take_turn = [&] {
    if (kPingPong) mbar::NamedSync(2 + cw, kConsumerThreads);
  };
  const auto pass_turn = [&](bool last) {
    if (kPingPong && !(last && cw == 1)) mbar::NamedArrive(2 + (cw ^ 1), kConsumerThreads);
  };
  if (kPingPong && cw == 1) mbar::NamedArrive(2, kConsumerThreads);  // consumer 0 goes first
  const auto release = [&](int b) {
    __syncwarp();
    if (lane == 0) mbar::Arrive(bar(b));
  };

  float o[kOAcc];
#pragma unroll
  for (int i = 0; i < kOAcc; ++i) o[i] = 0.0f;
  uint32_t pf[kBlockN / 16][4];
  float sacc[kSAcc];
  Softmax<kHeadDim, kBlockN> sm;
  // The GEMM issues stay outside conditionals: ptxas serializes wgmma issued on divergent paths.
  const auto issue_s = [&](int j) {
    const uint32_t k_s = base + L::kK + (j % kStages) * L::kTileBytes;
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      const uint32_t koff = (kk & 3) * 32;  // 16 columns = 32 bytes into the row
      const uint64_t da = wgmma::SmemDesc(q_wg + (kk >> 2) * (kBlockM * 128) + koff, 16, 1024);
      const uint64_t db = wgmma::SmemDesc(k_s + (kk >> 2) * (kBlockN * 128) + koff, 16, 1024);
      WgmmaSS<kBlockN>(sacc, da, db, kk > 0 ? 1 : 0);
    }
    wgmma::Commit();
  };
  const auto issue_pv = [&](int j) {
    const uint32_t v_s = base + L::kV + (j % kStages) * L::kTileBytes;
#pragma unroll
    for (int ks = 0; ks < kBlockN / 16; ++ks) {
      // V as B[keys][dims], N-major: 8-key groups 1024 bytes apart, 64-dim halves a tile apart.
      WgmmaRS<kHeadDim>(o, pf[ks], wgmma::SmemDesc(v_s + ks * 16 * 128, kBlockN * 128, 1024));
    }
    wgmma::Commit();
  };
  const auto wait_full = [&](int first, int j) {
    mbar::Wait(bar(first + j % kStages), (j / kStages) & 1);
    wgmma::FenceProxyAsync();  // the producer's cp.async bytes, seen by wgmma's async proxy
  };
  // Softmax of tile j (S landed), then P for the next P V; O must be idle when `alpha` applies.
  const auto softmax = [&](int j, float(&alpha)[2]) {
    wgmma::FenceRegs(sacc);
    release(L::kEmptyK + j % kStages);
    // Causal mask only where the tile reaches past this warp's first row (also masks keys past
    // the context: they are past every real row).
    const bool mask = (j + 1) * kBlockN - 1 > w.prefix + w.m0 + wrow;
    sm.Step(sacc, scale_log2, mask, j * kBlockN, pos0, alpha);
  };
  const auto to_p = [&] {
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
      pf[nt / 2][(nt & 1) * 2] = attn::PackBf16(sacc[nt * 4], sacc[nt * 4 + 1]);
      pf[nt / 2][(nt & 1) * 2 + 1] = attn::PackBf16(sacc[nt * 4 + 2], sacc[nt * 4 + 3]);
    }
  };

  mbar::Wait(bar(L::kQFull), 0);
  wait_full(L::kFullK, 0);  // (its fence covers Q too)
  take_turn();
  wgmma::Fence();
  issue_s(0);
  pass_turn(false);
  wgmma::Wait<0>();
  {
    float alpha[2];  // O is still zero
    softmax(0, alpha);
    to_p();
  }
  for (int j = 1; j < w.n_tiles; ++j) {
    wait_full(L::kFullK, j);
    wait_full(L::kFullV, j - 1);
    take_turn();
    wgmma::FenceRegs(o);
    wgmma::Fence();
    issue_s(j);
    issue_pv(j - 1);
    pass_turn(false);
    wgmma::Wait<1>();  // S_j; P_{j-1} V_{j-1} still running
    float alpha[2];
    softmax(j, alpha);
    wgmma::Wait<0>();
    wgmma::FenceRegs(o);
    release(L::kEmptyV + (j - 1) % kStages);
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; ++dt) {
      o[dt * 4] *= alpha[0], o[dt * 4 + 1] *= alpha[0];
      o[dt * 4 + 2] *= alpha[1], o[dt * 4 + 3] *= alpha[1];
    }
    to_p();
  }
  wait_full(L::kFullV, w.n_tiles - 1);
  take_turn();
  wgmma::FenceRegs(o);
  wgmma::Fence();
  issue_pv(w.n_tiles - 1);
  pass_turn(true);
  wgmma::Wait<0>();
  wgmma::FenceRegs(o);
  release(L::kEmptyV + (w.n_tiles - 1) % kStages);
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = sm.row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    inv[r] = 1.0f / sum;
  }
  const int64_t out_stride = int64_t{a.num_heads} * kHeadDim;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = wrow + g + r * 8;
    if (row >= w.rows) continue;
    __nv_bfloat16* dst =
        a.out + int64_t{w.q_begin + w.m0 + row} * out_stride + h * kHeadDim + 2 * t;
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; ++dt) {
      *reinterpret_cast<__nv_bfloat162*>(dst + dt * 8) =
          __floats2bfloat162_rn(o[dt * 4 + 2 * r] * inv[r], o[dt * 4 + 2 * r + 1] * inv[r]);
    }
  }
}

template <int kHeadDim, int kBlockN, int kStages, bool kPingPong>
__global__ void __launch_bounds__(kThreads, 1)
    PrefillWsKernel(PrefillAttentionArgs a, KvCacheLayer c) {
  using L = Layout<kHeadDim, kBlockN, kStages>;
  extern __shared__ unsigned char smem_raw[];
  const int seq = blockIdx.z, h = blockIdx.y;
  const int tile = gridDim.x - 1 - blockIdx.x;  // longest (latest) tiles first
  BlockWork w;
  w.q_begin = a.cu_seqlens[seq];
  const int new_len = a.cu_seqlens[seq + 1] - w.q_begin;
  w.m0 = tile * kBlockM;
  if (w.m0 >= new_len) return;  // the whole block leaves before any barrier
  w.prefix = a.prefix_lens[seq];
  w.rows = min(kBlockM, new_len - w.m0);
  w.n_keys = w.prefix + w.m0 + w.rows;  // the last row's position + 1
  w.n_tiles = (w.n_keys + kBlockN - 1) / kBlockN;
  w.kvh = h / (a.num_heads / c.num_kv_heads);
  w.table = a.block_tables + int64_t{seq} * a.max_blocks_per_seq;
  w.shift = (c.block_size & (c.block_size - 1)) == 0 ? __ffs(c.block_size) - 1 : -1;
  const uint32_t base = (attn::SmemAddr(smem_raw) + 1023) & ~1023u;
  if (threadIdx.x == 0) {
    mbar::Init(base + L::kBars + 8 * L::kQFull, 128);
    for (int s = 0; s < kStages; ++s) {
      mbar::Init(base + L::kBars + 8 * (L::kFullK + s), 128);
      mbar::Init(base + L::kBars + 8 * (L::kFullV + s), 128);
      mbar::Init(base + L::kBars + 8 * (L::kEmptyK + s), kConsumerWarps);
      mbar::Init(base + L::kBars + 8 * (L::kEmptyV + s), kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    if constexpr (kBlockN > 64) mbar::RegDealloc<56>();  // 2 x 224 + 56 = 504 = 3 x 168
    Produce<kHeadDim, kBlockN, kStages>(a, c, w, base, h);
  } else {
    if constexpr (kBlockN > 64) mbar::RegAlloc<224>();
    Consume<kHeadDim, kBlockN, kStages, kPingPong>(a, w, base, h);
  }
}

template <int kHeadDim, int kBlockN, int kStages, bool kPingPong>
void Launch(const PrefillAttentionArgs& a, const KvCacheLayer& c, cudaStream_t stream) {
  constexpr int kSmem = Layout<kHeadDim, kBlockN, kStages>::kSmem;
  auto kernel = PrefillWsKernel<kHeadDim, kBlockN, kStages, kPingPong>;
  // Not a stream operation, so it is allowed during graph capture.
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid((a.max_q_len + kBlockM - 1) / kBlockM, a.num_heads, a.num_seqs);
  kernel<<<grid, kThreads, kSmem, stream>>>(a, c);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

template <int kHeadDim>
void LaunchPrefillWs(const PrefillAttentionArgs& a, const KvCacheLayer& c, PrefillWsVariant v,
                     cudaStream_t stream) {
  switch (v) {  // the one place the variant becomes template parameters
    case PrefillWsVariant::kN64:
      return Launch<kHeadDim, 64, 3, false>(a, c, stream);
    case PrefillWsVariant::kN64PingPong:
      return Launch<kHeadDim, 64, 3, true>(a, c, stream);
    case PrefillWsVariant::kN128:
      return Launch<kHeadDim, 128, 2, false>(a, c, stream);
    case PrefillWsVariant::kN128PingPong:
      return Launch<kHeadDim, 128, 2, true>(a, c, stream);
  }
}
template void LaunchPrefillWs<64>(const PrefillAttentionArgs&, const KvCacheLayer&,
                                  PrefillWsVariant, cudaStream_t);
template void LaunchPrefillWs<128>(const PrefillAttentionArgs&, const KvCacheLayer&,
                                   PrefillWsVariant, cudaStream_t);

}  // namespace dq::cuda
