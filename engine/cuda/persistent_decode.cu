// The persistent decode kernel (persistent_decode.h): the task loop, the GEMV tasks' input
// (RMSNorm of x, or the rows the stage before wrote, staged in shared memory) and the launch.
#include <cstdio>
#include <cstdlib>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernel_util.cuh"
#include "engine/cuda/persistent_decode.h"
#include "engine/cuda/persistent_decode_attention.cuh"
#include "engine/cuda/persistent_decode_gemv.cuh"
#include "engine/model/decode_schedule.h"

namespace dq::cuda {
namespace pd {
namespace {

// RMSNorm of the step's rows of x into shared memory as bf16, with norm.cu's arithmetic for
// rows of 256 threads (thread i sums float4s i, i + 256, ... then the block reduction). A row of
// up to kHeld float4s per thread is read once (held in registers): the norm sits on each stage's
// critical path, right after its wait.
constexpr int kHeld = 8;
__device__ __forceinline__ void NormStore(float4 u, const float* weight, float inv, int i,
                                          __nv_bfloat162* o) {
  const float4 w = reinterpret_cast<const float4*>(weight)[i];
  o[2 * i] = __floats2bfloat162_rn(w.x * (u.x * inv), w.y * (u.y * inv));
  o[2 * i + 1] = __floats2bfloat162_rn(w.z * (u.z * inv), w.w * (u.w * inv));
}
__device__ void NormRows(const PersistentDecodeParams& p, const float* weight, __nv_bfloat16* xs,
                         float* scratch) {
  const int n = p.hidden, n4 = n / 4;
  const bool held = n4 <= kHeld * kPdThreads;
  for (int r = 0; r < p.rows; ++r) {
    const float* xr = p.x + int64_t{r} * n;
    float4 v[kHeld];
    float ss = 0.0f;
    if (held) {
#pragma unroll
      for (int k = 0; k < kHeld; ++k) {
        const int i = threadIdx.x + k * kPdThreads;
        v[k] = i < n4 ? LdCgF4(xr + 4 * i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int k = 0; k < kHeld; ++k) {
        if (threadIdx.x + k * kPdThreads < n4) {
          ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
        }
      }
    } else {
      for (int i = threadIdx.x; i < n4; i += kPdThreads) {
        const float4 u = LdCgF4(xr + 4 * i);
        ss += u.x * u.x + u.y * u.y + u.z * u.z + u.w * u.w;
      }
    }
    ss = detail::BlockSum(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(n) + p.eps);
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(xs + int64_t{r} * n);
    if (held) {
#pragma unroll
      for (int k = 0; k < kHeld; ++k) {
        const int i = threadIdx.x + k * kPdThreads;
        if (i < n4) NormStore(v[k], weight, inv, i, o);
      }
    } else {
      for (int i = threadIdx.x; i < n4; i += kPdThreads) {
        NormStore(LdCgF4(xr + 4 * i), weight, inv, i, o);
      }
    }
  }
}

// Rows [rows, in] of bf16 written during the step, copied to shared memory (in % 8 == 0).
__device__ void StageRows(const __nv_bfloat16* src, int rows, int64_t in, __nv_bfloat16* xs) {
  const int64_t n8 = rows * in / 8;
  for (int64_t i = threadIdx.x; i < n8; i += kPdThreads) {
    reinterpret_cast<uint4*>(xs)[i] = LdCgU4(src + 8 * i);
  }
}

// What a GEMV task reads and writes.
struct GemvJob {
  const PdLinear* w;
  const float* norm;           // set: input = RMSNorm(x; norm); else `input`
  const __nv_bfloat16* input;  // [rows, w->in]
  int64_t row_end;             // rows of part 0 below this are stored
  int parts;                   // 2: gate|up (rows r and inter + r pair)
  GemvOut out;
};

__device__ void StageInput(const PersistentDecodeParams& p, const GemvJob& j, __nv_bfloat16* xs,
                           float* scratch) {
  if (j.norm != nullptr) {
    NormRows(p, j.norm, xs, scratch);
  } else {
    StageRows(j.input, p.rows, j.w->in, xs);
  }
  __syncthreads();
}

template <int kBits, int kRing>
__device__ void IntTileGemv(const PersistentDecodeParams& p, const PdTask& t, const GemvJob& j,
                            unsigned char* smem, float* scratch) {
  const PdLinear& w = *j.w;
  TileTask s;
  s.codes = w.data;
  s.scales = w.scales;
  s.in = w.in;
  s.ngroups = w.in >> w.group_shift;
  s.group_shift = w.group_shift;
  s.tile0 = t.begin / 16;
  s.n = static_cast<int>((t.end + 15) / 16 - s.tile0);
  s.parts = j.parts;
  s.tile1 = j.parts == 2 ? (p.inter + t.begin) / 16 : 0;
  s.nchunks = static_cast<int>(w.in / TileFmt<kBits>::kChunkK);
  s.kw = w.kw;
  s.kw_shift = __ffs(w.kw) - 1;  // kw is a power of two (PdIntTileSplit)
  s.njobs = s.n * s.parts * s.kw;
  s.cluster_tree = w.cluster_tree != 0;
  const int64_t tile_bytes = int64_t{s.nchunks} * 512;
  PrefetchL2(s.codes + s.tile0 * tile_bytes, s.n * tile_bytes);
  if (s.parts == 2) PrefetchL2(s.codes + s.tile1 * tile_bytes, s.n * tile_bytes);
  unsigned char* ring = smem + RingOffset(p) + (threadIdx.x >> 5) * kRing;
  const TileCursor issue = PrimeTile<kBits, kRing>(s, ring);
  WaitTask(p, t);
  auto* xs = reinterpret_cast<__nv_bfloat16*>(smem);
  StageInput(p, j, xs, scratch);
  float* red = reinterpret_cast<float*>(smem + RedOffset(p));
  RunTileJobs<kBits, kRing>(s, issue, ring, xs, p.rows, red);
  __syncthreads();
  StoreTiles(s, red, p.rows, j.row_end, j.out);
}

template <int kRing>
__device__ void Bf16Gemv(const PersistentDecodeParams& p, const PdTask& t, const GemvJob& j,
                         unsigned char* smem, float* scratch) {
  const PdLinear& w = *j.w;
  Bf16Task s;
  s.data = w.data;
  s.in = w.in;
  s.row0 = t.begin;
  s.row1 = j.parts == 2 ? p.inter + t.begin : 0;
  s.n = static_cast<int>(t.end - t.begin);
  s.parts = j.parts;
  s.units = static_cast<int>(w.in / 8);
  s.nch = (s.units + 31) / 32;
  PrefetchL2(s.data + s.row0 * w.in * 2, s.n * w.in * 2);
  if (s.parts == 2) PrefetchL2(s.data + s.row1 * w.in * 2, s.n * w.in * 2);
  unsigned char* ring = smem + RingOffset(p) + (threadIdx.x >> 5) * kRing;
  const Bf16Cursor issue = PrimeBf16<kRing>(s, ring);
  WaitTask(p, t);
  auto* xs = reinterpret_cast<__nv_bfloat16*>(smem);
  StageInput(p, j, xs, scratch);
  RunBf16Rows<kRing>(s, issue, ring, xs, p.rows, j.out);
}

__device__ GemvJob JobOf(const PersistentDecodeParams& p, const PdTask& t, const PdBlock* b) {
  GemvJob j{};
  j.parts = 1;
  j.row_end = t.end;
  const int64_t q_dim = int64_t{p.num_heads} * p.head_dim;
  switch (static_cast<DecodeTaskKind>(t.kind)) {
    case DecodeTaskKind::kQkv:
      j.w = &b->in_proj;
      j.norm = b->norm;
      j.out = {OutMode::kBf16, p.qkv, nullptr, q_dim + 2 * int64_t{p.num_kv_heads} * p.head_dim};
      break;
    case DecodeTaskKind::kGateUp:
      j.w = &b->in_proj;
      j.norm = b->norm;
      j.parts = 2;
      j.out = {OutMode::kSwiGlu, p.act, nullptr, p.inter};
      break;
    case DecodeTaskKind::kO:
      j.w = &b->out_proj;
      j.input = p.attn;
      j.out = {OutMode::kAddF32, nullptr, p.x, p.hidden};
      break;
    case DecodeTaskKind::kDown:
      j.w = &b->out_proj;
      j.input = p.act;
      j.out = {OutMode::kAddF32, nullptr, p.x, p.hidden};
      break;
    default:  // kLmHead
      j.w = &p.lm_head;
      j.norm = p.final_norm;
      j.out = {OutMode::kAddF32, nullptr, p.logits, p.vocab, true};
      break;
  }
  return j;
}

template <int kRing>
__device__ void RunGemvTask(const PersistentDecodeParams& p, const PdTask& t, unsigned char* smem,
                            float* scratch) {
  const PdBlock* b = t.block >= 0 ? p.blocks + t.block : nullptr;
  const GemvJob j = JobOf(p, t, b);
  switch (j.w->format) {
    case PdFormat::kInt4Tile:
      return IntTileGemv<4, kRing>(p, t, j, smem, scratch);
    case PdFormat::kInt2Tile:
      return IntTileGemv<2, kRing>(p, t, j, smem, scratch);
    default:
      return Bf16Gemv<kRing>(p, t, j, smem, scratch);
  }
}

// Between an item's RoPE + K/V write and its attention in one task: the attention's loads
// (cp.async of K/V, the rotated q) must see what the CTA's other warps just stored.
__device__ __forceinline__ void RopeDone() {
  __threadfence_block();
  __syncthreads();
}

template <int kRing>
__device__ void RunTask(const PersistentDecodeParams& p, const PdTask& t, unsigned char* smem,
                        float* scratch) {
  const DecodeTaskKind kind = static_cast<DecodeTaskKind>(t.kind);
  if (kind == DecodeTaskKind::kRopeKv || kind == DecodeTaskKind::kAttention) {
    WaitTask(p, t);
    const PdBlock& b = p.blocks[t.block];
    const bool rope = kind == DecodeTaskKind::kRopeKv || p.rope_in_attention;
    const bool attention = kind == DecodeTaskKind::kAttention;
    if (p.head_dim == 128) {
      if (rope) RopeKvTask<128>(p, b, t.begin);
      if (rope && attention) RopeDone();
      if (attention) AttentionTask<128>(p, b, t.begin, smem);
    } else {
      if (rope) RopeKvTask<64>(p, b, t.begin);
      if (rope && attention) RopeDone();
      if (attention) AttentionTask<64>(p, b, t.begin, smem);
    }
  } else {
    RunGemvTask<kRing>(p, t, smem, scratch);
  }
  SignalTask(p, t);
}

template <int kRing, int kCtasPerSm>
__global__ void __launch_bounds__(kPdThreads, kCtasPerSm)
    PersistentDecodeKernel(PersistentDecodeParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float scratch[32];
  const int w = blockIdx.x;
  for (int qi = p.queue_begin[w]; qi < p.queue_begin[w + 1]; ++qi) {
    const PdTask t = p.tasks[p.queue[qi]];
    TracePoint(p, t, 0);
    RunTask<kRing>(p, t, smem, scratch);
  }
  // The last CTA out zeroes the counters for the next step: every other CTA has passed all its
  // waits by then.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(p.done, 1u) == gridDim.x - 1) {
      __threadfence();  // every other CTA's last signal is ordered before these stores
      for (int c = 0; c < p.num_counters; ++c) p.counters[c] = 0;
      *p.done = 0;
      __threadfence();
    }
  }
}

int WarpsPerTileShift(int64_t tiles, int64_t nchunks, int ctas_per_sm) {
  const int64_t want = ctas_per_sm * int64_t{wo::SmCount()};
  for (int shift = 0; shift < 3; ++shift) {
    const int64_t per_cta = 8 >> shift;
    if ((tiles + per_cta - 1) / per_cta >= want && nchunks >= (1 << shift)) return shift;
  }
  return nchunks >= 8 ? 3 : (nchunks >= 4 ? 2 : (nchunks >= 2 ? 1 : 0));
}

}  // namespace
}  // namespace pd

size_t PersistentDecodeSmemBytes(const PersistentDecodeParams& p) {
  const int64_t gemv = pd::RedOffset(p) + int64_t{p.max_jobs} * pd::kJobBytes;
  const int64_t attn = p.attn_groups * pd::AttnGroupBytes(p.head_dim);
  return static_cast<size_t>(gemv > attn ? gemv : attn);
}

size_t PersistentDecodeSmemLimit(int ctas_per_sm) {
  int dev = 0, block = 0, sm = 0, reserved = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
  const int per_cta = sm / ctas_per_sm - reserved;
  // Less the kernel's static scratch.
  return static_cast<size_t>(per_cta < block ? per_cta : block) - 1024;
}

void PdIntTileSplit(int bits, int64_t out, int64_t in, int ctas_per_sm, bool cluster, int* kw,
                    bool* cluster_tree) {
  // As RunIntTile (gemv_int_tile.cu) picks its kernel for this matrix.
  const int64_t tiles = (out + 15) / 16, nchunks = in / wo::IntTileChunkK(bits);
  if (tiles < 2 * int64_t{wo::SmCount()} && nchunks >= 16) {
    *kw = 16;
    *cluster_tree = cluster;
    return;
  }
  *kw = 1 << pd::WarpsPerTileShift(tiles, nchunks, ctas_per_sm);
  *cluster_tree = false;
}

bool PdIntTileLayout(int bits, int group, int64_t in) { return wo::IntTileLayout(bits, group, in); }

template <int kRing, int kCtasPerSm>
void LaunchWithRing(const PersistentDecodeParams& p, int workers, size_t smem,
                    cudaStream_t stream) {
  const auto kernel = pd::PersistentDecodeKernel<kRing, kCtasPerSm>;
  // A host-side attribute, safe during graph capture.
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(workers));
  cfg.blockDim = dim3(kPdThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

template <int kCtasPerSm>
void LaunchWithCtas(const PersistentDecodeParams& p, int workers, size_t smem,
                    cudaStream_t stream) {
  const int ring = p.ring_bytes;
  if constexpr (kCtasPerSm == 2) {
    // Two CTAs a SM leave room for the smallest ring only (PreparePersistentDecode).
    if (ring == kPdRingBytes[2])
      return LaunchWithRing<kPdRingBytes[2], 2>(p, workers, smem, stream);
  } else {
    if (ring == kPdRingBytes[0])
      return LaunchWithRing<kPdRingBytes[0], 1>(p, workers, smem, stream);
    if (ring == kPdRingBytes[1])
      return LaunchWithRing<kPdRingBytes[1], 1>(p, workers, smem, stream);
    if (ring == kPdRingBytes[2])
      return LaunchWithRing<kPdRingBytes[2], 1>(p, workers, smem, stream);
  }
  // An invariant: the host picks ring_bytes from kPdRingBytes, the smallest for two CTAs.
  std::fprintf(stderr, "persistent decode: no kernel for a ring of %d bytes at %d CTAs per SM\n",
               ring, kCtasPerSm);
  std::abort();
}

void LaunchPersistentDecode(const PersistentDecodeParams& p, int workers, cudaStream_t stream) {
  const size_t smem = PersistentDecodeSmemBytes(p);
  if (p.ctas_per_sm == 2) return LaunchWithCtas<2>(p, workers, smem, stream);
  if (p.ctas_per_sm != 1) {  // an invariant: ValidateKernelOptions allows 1 or 2
    std::fprintf(stderr, "persistent decode: %d CTAs per SM\n", p.ctas_per_sm);
    std::abort();
  }
  LaunchWithCtas<1>(p, workers, smem, stream);
}

}  // namespace dq::cuda
