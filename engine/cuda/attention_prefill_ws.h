// Internal to the prefill attention launcher (attention_prefill.cu): the warp-specialized Hopper
// kernels of attention_prefill_ws.cu. Same arguments and preconditions as
// PrefillAttentionForward, already normalized (q_stride and scale set).
#pragma once

#include <cuda_runtime.h>

#include "engine/cuda/attention_prefill.h"

namespace dq::cuda {

enum class PrefillWsVariant {
  kN64,           // 64-key tiles, 3 stages, consumers independent
  kN64PingPong,   // ... consumers take turns issuing their GEMMs
  kN128,          // 128-key tiles, 2 stages, registers moved from the producer to the consumers
  kN128PingPong,  // ... with turns
};

template <int kHeadDim>
void LaunchPrefillWs(const PrefillAttentionArgs& a, const KvCacheLayer& c, PrefillWsVariant v,
                     cudaStream_t stream);

}  // namespace dq::cuda
