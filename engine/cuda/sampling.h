// Token selection on the device, one block per row of logits.
//   ArgmaxForward: greedy, the lowest id on ties, NaN skipped (id 0 if nothing beats -inf),
//     exactly as the CPU Sampler's temperature-0 path.
//   SampleForward: temperature, top-k, top-p, min-p and a draw with a host-given uniform u per
//     row (the CPU Sampler's counter-based RNG value), with the CPU Sampler's semantics: logits
//     scaled by 1/T (greedy below T = 1e-5); without top-k/top-p, min-p on logits
//     (l >= max + log(min_p)) and a draw in id order, which matches the CPU token for token;
//     with top-k/top-p, the same kept set (top-k by (logit desc, id asc), the nucleus = the
//     most likely tokens while the mass before each is < top_p * total, then p/p_max >= min_p)
//     and the same probabilities, drawn in id order over the kept set, as the CPU Sampler
//     draws too, so a seeded stream gives the same tokens on either path (up to near-ties).
// Penalties (presence/frequency/repetition) are not applied here. Capture-safe; no workspace.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dq::cuda {

struct LogitsView {
  const float* f32 = nullptr;           // [rows, row_stride], or
  const __nv_bfloat16* bf16 = nullptr;  // [rows, row_stride] (exactly one of the two)
  int64_t rows = 0;
  int vocab = 0;
  int64_t row_stride = 0;  // 0: vocab
};

void ArgmaxForward(const LogitsView& logits, int32_t* out_ids, cudaStream_t stream);

struct SamplingArgs {
  LogitsView logits;
  const float* temperature = nullptr;  // [rows]
  const int32_t* top_k = nullptr;      // [rows]; <= 0 or >= vocab: off
  const float* top_p = nullptr;        // [rows]; 1: off
  const float* min_p = nullptr;        // [rows]; 0: off
  const double* uniform = nullptr;     // [rows], in [0, 1)
  int32_t* out_ids = nullptr;          // [rows]
};

// Preconditions (asserted): vocab < 2^24, parameters validated as the CPU Sampler's.
void SampleForward(const SamplingArgs& args, cudaStream_t stream);

}  // namespace dq::cuda
