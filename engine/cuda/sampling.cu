#include <cassert>
#include <cfloat>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernel_util.cuh"
#include "engine/cuda/sampling.h"

namespace dq::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;
constexpr int32_t kNoId = 0x7fffffff;
// Probabilities enter the radix histograms as fixed point (2^44 per unit): exact integer sums,
// and a 2^19-token vocabulary of p <= 1 still fits in 64 bits.
constexpr double kFixedScale = 17592186044416.0;  // 2^44

struct Row {
  const float* f32;
  const __nv_bfloat16* bf16;
  int vocab;
  float inv_t;
  __device__ float operator()(int i) const {
    const float l = f32 != nullptr ? f32[i] : __bfloat162float(bf16[i]);
    return l * inv_t + 0.0f;  // + 0 folds -0 into +0 (the CPU compares values, not bits)
  }
};

__device__ __forceinline__ uint32_t OrderKey(float v) {  // larger float -> larger key
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ int32_t BlockMinId(int32_t id, int32_t* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) id = min(id, __shfl_xor_sync(0xffffffffu, id, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = id;
  __syncthreads();
  id = kNoId;
  for (int w = 0; w < kWarps; ++w) id = min(id, scratch[w]);
  return id;
}

__device__ float BlockMax(float v, float* scratch) {
  v = detail::WarpMax(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  v = -INFINITY;
  for (int w = 0; w < kWarps; ++w) v = fmaxf(v, scratch[w]);
  return v;
}

__device__ double BlockSumD(double v, double* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  v = 0.0;
  for (int w = 0; w < kWarps; ++w) v += scratch[w];
  return v;
}

// Lowest id whose value equals the row's maximum (> -inf); kNoId if none.
__device__ int32_t BlockArgmax(const Row& row, float* fscratch, int32_t* iscratch) {
  float best = -INFINITY;
  for (int i = threadIdx.x; i < row.vocab; i += kThreads) best = fmaxf(best, row(i));
  best = BlockMax(best, fscratch);
  int32_t id = kNoId;
  if (best > -INFINITY) {
    for (int i = threadIdx.x; i < row.vocab && id == kNoId; i += kThreads) {
      if (row(i) == best) id = i;
    }
  }
  return BlockMinId(id, iscratch);
}

struct SelectShared {
  unsigned long long warp_hist[kWarps][kBins];
  unsigned long long hist[kBins];
  unsigned long long found_acc;
  uint32_t found_digit;
};

// Histograms `weight(i)` of the members (weight > 0 or counted) whose `key(i)` matches `prefix`
// under `mask`, by the 8-bit digit at `shift`; then finds the digit where the cumulative weight
// (walking keys downwards when `descending`) first reaches `target` from `acc`. Returns the
// digit and advances `acc` by the weight of the bins passed over.
template <typename KeyFn, typename WeightFn>
__device__ uint32_t SelectDigit(SelectShared& s, int n, KeyFn key, WeightFn weight, uint32_t prefix,
                                uint32_t mask, int shift, bool descending,
                                unsigned long long target, unsigned long long& acc) {
  const int warp = threadIdx.x >> 5;
  for (int b = threadIdx.x; b < kWarps * kBins; b += kThreads) (&s.warp_hist[0][0])[b] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const unsigned long long w = weight(i);
    if (w == 0) continue;
    const uint32_t k = key(i);
    if ((k & mask) == prefix) atomicAdd(&s.warp_hist[warp][(k >> shift) & 0xff], w);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += kThreads) {
    unsigned long long sum = 0;
    for (int w = 0; w < kWarps; ++w) sum += s.warp_hist[w][b];
    s.hist[b] = sum;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long a = acc;
    uint32_t digit = descending ? 0 : kBins - 1;
    for (int j = 0; j < kBins; ++j) {
      const int b = descending ? kBins - 1 - j : j;
      if (a + s.hist[b] >= target) {
        digit = b;
        break;
      }
      a += s.hist[b];
    }
    s.found_digit = digit;
    s.found_acc = a;
  }
  __syncthreads();
  acc = s.found_acc;
  return s.found_digit;
}

struct Cut {
  uint32_t key;
  int32_t id;
};

// The element at which the cumulative weight, in (key desc, id asc) order, first reaches
// `target` (weight 0 = not a member). Members up to and including it are the kept set.
template <typename KeyFn, typename WeightFn>
__device__ Cut SelectCut(SelectShared& s, int n, KeyFn key, WeightFn weight,
                         unsigned long long target) {
  unsigned long long acc = 0;
  uint32_t prefix = 0, mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    prefix |= SelectDigit(s, n, key, weight, prefix, mask, shift, true, target, acc) << shift;
    mask |= 0xffu << shift;
  }
  const uint32_t kkey = prefix;
  auto id_weight = [&](int i) { return key(i) == kkey ? weight(i) : 0ull; };
  auto id_key = [](int i) { return static_cast<uint32_t>(i); };
  prefix = 0, mask = 0;
  for (int shift = 16; shift >= 0; shift -= 8) {
    prefix |= SelectDigit(s, n, id_key, id_weight, prefix, mask, shift, false, target, acc)
              << shift;
    mask |= 0xffu << shift;
  }
  return {kkey, static_cast<int32_t>(prefix)};
}

__device__ __forceinline__ bool Before(uint32_t key, int32_t id, Cut c) {
  return key > c.key || (key == c.key && id <= c.id);
}

// Draws in id order over `prob(i)` (0 = dropped): the first id whose inclusive cumulative mass
// exceeds u * total; the last kept id if rounding leaves it short.
template <typename ProbFn>
__device__ int32_t DrawInIdOrder(int n, ProbFn prob, double u, double* dscratch,
                                 int32_t* iscratch) {
  const int chunk = (n + kThreads - 1) / kThreads;
  const int lo = min(n, static_cast<int>(threadIdx.x) * chunk), hi = min(n, lo + chunk);
  double mine = 0.0;
  int32_t last = -1;
  for (int i = lo; i < hi; ++i) {
    const float p = prob(i);
    if (p > 0.0f) mine += p, last = i;
  }
  __shared__ double prefix[kThreads];
  prefix[threadIdx.x] = mine;
  const double total = BlockSumD(mine, dscratch);
  if (threadIdx.x == 0) {  // exclusive scan, in id order like the CPU's running sum
    double a = 0.0;
    for (int t = 0; t < kThreads; ++t) {
      const double v = prefix[t];
      prefix[t] = a;
      a += v;
    }
  }
  __syncthreads();
  const double target = u * total;
  int32_t hit = kNoId;
  if (prefix[threadIdx.x] + mine > target) {
    double acc = prefix[threadIdx.x];
    for (int i = lo; i < hi; ++i) {
      const float p = prob(i);
      if (p <= 0.0f) continue;
      acc += p;
      if (acc > target) {
        hit = i;
        break;
      }
    }
  }
  hit = BlockMinId(hit, iscratch);
  if (hit != kNoId) return hit;
  const int32_t neg_last = BlockMinId(last >= 0 ? -last : kNoId, iscratch);
  return neg_last == kNoId ? 0 : -neg_last;
}

// (value, id) with the larger value, the lower id on a tie.
__device__ __forceinline__ void KeepBest(float& best, int32_t& id, float v, int32_t i) {
  if (v > best || (v == best && i < id)) best = v, id = i;
}

// Greedy pick: BlockArgmax's answer (the lowest id of the row's maximum > -inf) in one pass over
// the row, kUnroll independent loads in flight per thread: the two dependent passes took 69 us
// per step on a 151,936-token vocabulary (H200 profile), this is a few.
__global__ void __launch_bounds__(kThreads) ArgmaxKernel(LogitsView v, int32_t* out) {
  constexpr int kUnroll = 8;
  __shared__ float fs[kWarps];
  __shared__ int32_t is[kWarps];
  const Row row{v.f32 ? v.f32 + blockIdx.x * v.row_stride : nullptr,
                v.bf16 ? v.bf16 + blockIdx.x * v.row_stride : nullptr, v.vocab, 1.0f};
  float best = -INFINITY;
  int32_t id = kNoId;
  int i = threadIdx.x;
  for (; i + (kUnroll - 1) * kThreads < row.vocab; i += kUnroll * kThreads) {
    float x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) x[u] = row(i + u * kThreads);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (x[u] > best) best = x[u], id = i + u * kThreads;  // ids rise: keeps the first
    }
  }
  for (; i < row.vocab; i += kThreads) {
    const float x = row(i);
    if (x > best) best = x, id = i;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    KeepBest(best, id, __shfl_xor_sync(0xffffffffu, best, o), __shfl_xor_sync(0xffffffffu, id, o));
  }
  if ((threadIdx.x & 31) == 0) fs[threadIdx.x >> 5] = best, is[threadIdx.x >> 5] = id;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) KeepBest(best, id, fs[w], is[w]);
    out[blockIdx.x] = id == kNoId ? 0 : id;
  }
}

__device__ __forceinline__ unsigned long long Fixed(float p) {
  return __double2ull_rn(static_cast<double>(p) * kFixedScale);
}

// Top-k / top-p / min-p over a row with a finite maximum `m` (the CPU's SampleSorted).
__device__ int32_t SampleSortedRow(const Row& row, float m, int top_k, float top_p, float min_p,
                                   double u, SelectShared& s, double* ds, int32_t* is) {
  const int n = row.vocab;
  const bool top_k_on = top_k > 0 && top_k < n;
  Cut kc{0u, kNoId};
  auto vkey = [&](int i) { return OrderKey(row(i)); };
  if (top_k_on) {
    auto one = [&](int i) { return isnan(row(i)) ? 0ull : 1ull; };
    kc = SelectCut(s, n, vkey, one, static_cast<unsigned long long>(top_k));
  }
  // Probability of a top-k member (0 for NaN and non-members), as the CPU's exp(l - max).
  auto pk = [&](int i) {
    const float v = row(i);
    return !isnan(v) && Before(OrderKey(v), i, kc) ? expf(v - m) : 0.0f;
  };
  Cut pc{0u, kNoId};
  if (top_p < 1.0f) {
    __shared__ unsigned long long total;
    if (threadIdx.x == 0) total = 0;
    __syncthreads();
    unsigned long long mine = 0;
    for (int i = threadIdx.x; i < n; i += kThreads) mine += Fixed(pk(i));
    atomicAdd(&total, mine);
    __syncthreads();
    const auto target =
        static_cast<unsigned long long>(static_cast<double>(top_p) * static_cast<double>(total));
    auto pkey = [&](int i) { return OrderKey(pk(i)); };
    auto pw = [&](int i) { return Fixed(pk(i)); };
    pc = SelectCut(s, n, pkey, pw, target > 0 ? target : 1ull);
  }
  auto prob = [&](int i) {
    const float p = pk(i);
    return p > 0.0f && p >= min_p && Before(OrderKey(p), i, pc) ? p : 0.0f;
  };
  return DrawInIdOrder(n, prob, u, ds, is);
}

__global__ void __launch_bounds__(kThreads) SampleKernel(SamplingArgs a) {
  __shared__ SelectShared s;
  __shared__ float fs[kWarps];
  __shared__ double ds[kWarps];
  __shared__ int32_t is[kWarps];
  const int r = blockIdx.x;
  const LogitsView& v = a.logits;
  const float t = a.temperature[r];
  const bool greedy = t < 1e-5f;  // the CPU Sampler's kGreedyTemperature
  const Row row{v.f32 ? v.f32 + r * v.row_stride : nullptr,
                v.bf16 ? v.bf16 + r * v.row_stride : nullptr, v.vocab, greedy ? 1.0f : 1.0f / t};
  int32_t id;
  const float top_p = a.top_p[r], min_p = a.min_p[r];
  const int top_k = a.top_k[r];
  const bool sorted = (top_k > 0 && top_k < v.vocab) || top_p < 1.0f;
  const float m = greedy ? 0.0f : [&] {
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < v.vocab; i += kThreads) mx = fmaxf(mx, row(i));
    return BlockMax(mx, fs);
  }();
  if (greedy || !isfinite(m)) {
    id = BlockArgmax(row, fs, is);
    if (!greedy && sorted && m == -INFINITY) {  // CPU: the first non-NaN candidate
      int32_t first = kNoId;
      for (int i = threadIdx.x; i < v.vocab && first == kNoId; i += kThreads) {
        if (!isnan(row(i))) first = i;
      }
      id = BlockMinId(first, is);
    }
    id = id == kNoId ? 0 : id;
  } else if (!sorted) {  // the CPU's SampleUnsorted: min-p on logits, draw in id order
    const float threshold = min_p > 0.0f ? m + logf(min_p) : -INFINITY;
    auto prob = [&](int i) {
      const float l = row(i);
      return l >= threshold ? expf(l - m) : 0.0f;
    };
    id = DrawInIdOrder(v.vocab, prob, a.uniform[r], ds, is);
  } else {
    id = SampleSortedRow(row, m, top_k, top_p, min_p, a.uniform[r], s, ds, is);
  }
  if (threadIdx.x == 0) a.out_ids[r] = id;
}

LogitsView Normalized(const LogitsView& v) {
  LogitsView n = v;
  if (n.row_stride == 0) n.row_stride = n.vocab;
  assert((n.f32 == nullptr) != (n.bf16 == nullptr) && n.vocab > 0 && n.vocab < (1 << 24));
  return n;
}

}  // namespace

void ArgmaxForward(const LogitsView& logits, int32_t* out_ids, cudaStream_t stream) {
  const LogitsView v = Normalized(logits);
  if (v.rows == 0) return;
  ArgmaxKernel<<<static_cast<unsigned>(v.rows), kThreads, 0, stream>>>(v, out_ids);
  CUDA_CHECK_LAUNCH();
}

void SampleForward(const SamplingArgs& args, cudaStream_t stream) {
  SamplingArgs a = args;
  a.logits = Normalized(args.logits);
  assert(a.temperature && a.top_k && a.top_p && a.min_p && a.uniform && a.out_ids);
  if (a.logits.rows == 0) return;
  SampleKernel<<<static_cast<unsigned>(a.logits.rows), kThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dq::cuda
