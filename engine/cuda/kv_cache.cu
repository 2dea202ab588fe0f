#include <cassert>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernel_util.cuh"
#include "engine/cuda/kv_cache.h"

namespace dq::cuda {
namespace {

// One thread per 16 bytes (8 values) of a token's K or V row.
__global__ void WriteKvKernel(KvWriteArgs a, KvCacheLayer c) {
  const int row_chunks = c.num_kv_heads * c.head_dim / 8;
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= a.tokens * row_chunks * 2) return;
  const int64_t t = i / (2 * row_chunks);
  const int rem = static_cast<int>(i % (2 * row_chunks));
  const bool is_v = rem >= row_chunks;
  const int chunk = is_v ? rem - row_chunks : rem;
  const int32_t slot = a.slot_mapping[t];
  if (slot < 0) return;
  const __nv_bfloat16* src = (is_v ? a.v + t * a.v_stride : a.k + t * a.k_stride) + chunk * 8;
  __nv_bfloat16* dst = (is_v ? c.v : c.k) + slot * c.token_stride() + chunk * 8;
  *reinterpret_cast<detail::Bf16x8*>(dst) = *reinterpret_cast<const detail::Bf16x8*>(src);
}

}  // namespace

void WriteKvCache(const KvWriteArgs& args, const KvCacheLayer& cache, cudaStream_t stream) {
  KvWriteArgs a = args;
  if (a.k_stride == 0) a.k_stride = cache.token_stride();
  if (a.v_stride == 0) a.v_stride = cache.token_stride();
  assert(cache.head_dim % 8 == 0 && a.k_stride % 8 == 0 && a.v_stride % 8 == 0);
  if (a.tokens == 0) return;
  const int64_t threads = a.tokens * cache.token_stride() / 8 * 2;
  const int block = 256;
  WriteKvKernel<<<static_cast<unsigned>((threads + block - 1) / block), block, 0, stream>>>(a,
                                                                                            cache);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dq::cuda
