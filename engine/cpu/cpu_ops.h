// CPU reference kernels: fp32 activations and accumulation, multithreaded where it matters.
// These define the engine's numerics; every other backend is tested against them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/thread_pool.h"
#include "engine/kvcache/kv_block_pool.h"
#include "engine/model/linear_weight.h"
#include "engine/model/model_config.h"

namespace dq::cpu {

struct MatMulOptions {
  // W's values rounded to bf16 first (how the CUDA backend computes a weight-only linear of many
  // rows, dequantized to bf16 for a GEMM; a test oracle).
  bool bf16_weights = false;
  // Weights packed for it (LinearWeight::q8_packed: GGUF Q4_1 / Q8_0), at any row count: each
  // row of x quantized to 8-bit blocks once and integer dots (q8_packed.h), the fast decode
  // path; not the reference. A row's result does not depend on the others (batch-invariant).
  bool q8_activations = false;
};

// y[m, :] = W x[m, :] for m in [0, rows): x is [rows, in], y is [rows, out], row-major.
void MatMul(const LinearWeight& w, const float* x, int64_t rows, float* y, ThreadPool& pool,
            const MatMulOptions& options = {});

// out = x / sqrt(mean(x^2) + eps) * weight, per row of `n` values. `out` may alias `x`.
void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t n, float eps, float* out);

// x[i] += y[i].
void AddInPlace(float* x, const float* y, int64_t n);

// gate[i] = silu(gate[i]) * up[i] over `n` values.
void SiluMulInPlace(float* gate, const float* up, int64_t n);
// gate[i] = gelu_tanh(gate[i]) * up[i] (GeGLU with PyTorch's tanh approximation, Gemma's).
void GeluTanhMulInPlace(float* gate, const float* up, int64_t n);

// Rotary position embedding over `num_heads` heads of `head_dim` at position `pos`, in place.
// inv_freq has head_dim / 2 entries.
void ApplyRope(float* x, int num_heads, int head_dim, int pos, const float* inv_freq,
               RopeStyle style);

// HF's inverse frequencies: 1 / theta^(2i / head_dim), computed in fp32 as HF does.
std::vector<float> RopeInverseFrequencies(int head_dim, float theta);

// Plan for attention over one layer: tokens of several sequences, each attending causally to
// its own cached K/V (this step's K/V already written to the pool).
struct AttentionToken {
  const KvSequence* seq;  // block table of the token's sequence
  int position;           // the token's position; it attends to positions [0, position]
};

// How PagedAttention computes.
struct AttentionOptions {
  // FP8 (e4m3) Q, K, V and P, emulating the CUDA FP8 prefill attention (fp8_attention.h).
  bool fp8 = false;
  // > 0: the numerics of CUDA's bf16 prefill attention (attention_prefill.h) with key tiles of
  // this many keys: scores in the log2 domain, the running row maximum updated tile by tile, P
  // rounded to bf16 for P.V while the denominator sums the unrounded P, and the output scaled by
  // the denominator's reciprocal. A test oracle (DecoderModelOptions::bf16_activations).
  int bf16_p_key_tile = 0;
  // > 0: sliding-window attention, each token seeing its latest `window` positions (itself
  // included; Gemma's local layers). Exact path only (neither fp8 nor bf16_p_key_tile).
  int window = 0;
  // The scores' scale; 0: 1/sqrt(head_dim).
  float scale = 0.0f;
};

// One query head of PagedAttention's exact path: `qh` ([head_dim]) of token `t` against KV head
// `kv_head` of `layer`, into `oh`; `scores` is scratch. PagedAttention computes every head so
// (`window` and `scale` as in AttentionOptions).
void AttentionHead(const KvBlockPool& pool, int layer, const AttentionToken& t, const float* qh,
                   int kv_head, float* oh, std::vector<float>& scores, int window = 0,
                   float scale = 0.0f);

// Row `r` of weight-only `w` times x, as MatMul computes it for up to 2 rows of x (up to 8 for
// plain dtypes): DotRow on the stored row, or a codec's dequantized row (into `row`, [in]) and
// DotF32.
float LinearRowDot(const LinearWeight& w, int64_t r, const float* x, float* row);

// q: [tokens, num_heads * head_dim]; out: same shape. GQA: head h reads KV head
// h / (num_heads / num_kv_heads). Exact (fp32) unless options.fp8.
void PagedAttention(const KvBlockPool& pool, int layer, std::span<const AttentionToken> tokens,
                    const float* q, int num_heads, float* out, ThreadPool& pool_threads,
                    const AttentionOptions& options = {});

}  // namespace dq::cpu
