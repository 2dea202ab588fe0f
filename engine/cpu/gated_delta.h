// The gated delta rule, the recurrence of Gated DeltaNet (the linear-attention layers of
// Qwen3-Next and Qwen3.5; issue 21), on the CPU in its two forms: the recurrent step that decode
// runs one token at a time, and the chunked form that prefill runs (WY representation within a
// chunk, the state carried between chunks), which equal each other to fp32 rounding. Both follow
// HF transformers' torch_recurrent_gated_delta_rule / torch_chunk_gated_delta_rule
// (models/qwen3_next), whose outputs are the golden (tests/golden/gdn).
//
// Per head, with state S ([dk][dv], fp32) and the query scaled by 1 / sqrt(dk), token t does
//   S <- exp(g_t) S;   d = beta_t (v_t - S^T k_t);   S <- S + k_t d^T;   o_t = S^T q_t.
// q and k are used as given: the layer L2-normalizes them before (and the caller applies the
// layer's gates). Layouts: q, k [T][heads][dk]; v, out [T][heads][dv]; g (log decay, <= 0) and
// beta [T][heads]; state [heads][dk][dv], read as the initial state and left as the final one.
#pragma once

#include <cstdint>

namespace dq::cpu {

struct GatedDeltaShape {
  int heads = 1;
  int dk = 1;  // key (and query) head dim
  int dv = 1;  // value head dim
};

// `tokens` steps of the recurrence, one after another.
void GatedDeltaRecurrent(const GatedDeltaShape& s, int64_t tokens, const float* q, const float* k,
                         const float* v, const float* g, const float* beta, float* state,
                         float* out);

// The same result in chunks of `chunk` tokens (HF's 64; the last chunk zero-padded).
void GatedDeltaChunked(const GatedDeltaShape& s, int64_t tokens, const float* q, const float* k,
                       const float* v, const float* g, const float* beta, float* state, float* out,
                       int chunk = 64);

// The layer's other per-token steps around the recurrence.
// x *= 1 / sqrt(sum(x^2) + eps) per row of `dim` (FLA's l2norm, which q and k go through).
void L2NormRows(float* x, int64_t rows, int dim, float eps = 1e-6f);

// The depthwise causal conv1d with SiLU over the q|k|v channels: out_t[c] =
// silu(sum_j weight[c][j] x_{t - kernel + 1 + j}[c]), x [tokens][channels], weight
// [channels][kernel]. `state` ([channels][kernel - 1], oldest first; zeros for a new sequence)
// holds the inputs before x and is left holding the last kernel - 1, so prefill (many tokens)
// and decode (one) are the same call.
void CausalConv1dSilu(int channels, int kernel, int64_t tokens, const float* x, const float* weight,
                      float* state, float* out);

// The output gate: out = weight * RMSNorm(x) * silu(z) per row of `dim` (a value head).
void GatedRmsNorm(const float* x, const float* z, const float* weight, int64_t rows, int dim,
                  float eps, float* out);

}  // namespace dq::cpu
