// FP8 (e4m3) causal attention emulated on the CPU: the numerics of the CUDA backend's FP8 prefill
// attention (engine/cuda/attention_prefill_fp8.h, cuda::CudaBackendOptions::fp8_attention), so
// that a CPU run shows what that scheme does to a model's predictions (any head_dim; the kernel
// takes 128 only). The definition, per forward pass:
//  - K and V: per sequence, KV head and channel d, amax over the pass's whole context [0, ctx)
//    (ctx: the sequence's last new position + 1), clamped to >= 1e-30;
//    k' = E4M3(k * (448 / amax_k)) * (amax_k / 448), v' likewise.
//  - Q, per token and query head, with K's channel scales folded in:
//    x_d = q_d * (amax_k[d] / 448), qs = max(max_d |x_d|, 1e-30) / 448,
//    q'_d = E4M3(x_d * (1 / qs)) * qs / (amax_k[d] / 448).
//  - s_j = q' . k'_j over the keys j <= position, m = max_j s_j,
//    p_j = exp2((s_j - m) * scale * log2(e) + 8) (P times 2^8: e4m3's subnormals start at 2^-9),
//    out = sum_j E4M3(p_j) v'_j / sum_j p_j (the denominator sums the unrounded p, as the
//    kernel does).
// Close to the GPU kernel, not bit-identical: the kernel's softmax uses a running row maximum
// (tile by tile) where this uses the row's final one, exp2 is approximate there, and the
// summation orders differ. The K/V cache itself is not changed.
#pragma once

#include <span>

#include "common/thread_pool.h"
#include "engine/cpu/cpu_ops.h"
#include "engine/kvcache/kv_block_pool.h"

namespace dq::cpu {

// E4M3(x * inv) * scale: the e4m3 round trip of x in units of `scale` (inv = its reciprocal, as
// the kernels multiply).
float E4m3RoundTrip(float x, float inv, float scale);

// PagedAttention's contract (cpu_ops.h) with the FP8 numerics above. A sequence's context is
// [0, 1 + the largest position among its tokens in `tokens`).
void Fp8PagedAttention(const KvBlockPool& pool, int layer, std::span<const AttentionToken> tokens,
                       const float* q, int num_heads, float* out, ThreadPool& threads);

}  // namespace dq::cpu
