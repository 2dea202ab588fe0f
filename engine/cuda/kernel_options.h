// The kernel choices of the CUDA backend (issue 18): where more than one kernel computes the same
// op, which one runs is an option of the model (CudaBackendOptions::kernels), checked once at
// start-up (ValidateKernelOptions) and passed down to the launchers in their argument structs
// (PrefillAttentionArgs::variant, WeightOnlyGemvArgs::int_tile) or through the LinearContext
// (LinearContext::SetOptions). The defaults are the variants that won their measurements; the
// alternatives kept are those ahead somewhere in a recorded measurement, chosen by device, or
// never compared (each has a GPU test against the CPU reference). Variants that lost their
// benchmarks were deleted with their environment variables (issue 18; git keeps them).
//
// As text (a worker's --cuda-kernels flag: ParseKernelOptions): comma-separated key=value pairs,
// keys left out keep their defaults, e.g. "prefill_attention=wg128pp,int_tile_cluster=off".
//   prefill_attention     wg64pp (default) | wg128pp
//   nvfp4_gemm            auto (default) | native | unpack
//   int_tile_ctas_per_sm  1..8 (default 2)
//   int_tile_cluster      on (default) | off
//   persistent_decode     off (default) | on
//   persistent_ctas_per_sm  1 (default) | 2
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace dq::cuda {

// Bf16 causal prefill attention (attention_prefill.h): the Hopper wgmma kernel, two ping-pong
// warpgroups of 64 query rows, with key tiles of 64 or 128. H200, Qwen3-4B layer
// (bench/results/gpu_attention_timing_h200.json, gpu_tests_4d1b75d_h200.log): 64-key tiles are
// ahead from 8K tokens (8K: 1.53 vs 1.59 ms; 32K: 21.2 vs 22.9 ms), 128-key tiles at 2K
// (0.147 vs 0.150 ms).
enum class PrefillAttentionKernel {
  kWgmma64,   // "wg64pp": 64-key tiles, 2 blocks per SM (the default)
  kWgmma128,  // "wg128pp": 128-key tiles, 1 block per SM
};

// The GEMM of NVFP4 W4A4 linears (nvfp4_path.h): by compute capability (native FP4 from 10.0,
// else unpacked to bf16), or forced (a forced native path without FP4 tensor cores runs its
// packed operands unpacked to bf16: testable on Hopper).
enum class Nvfp4Gemm { kAuto, kNative, kUnpack };

// The int4 / int2 tile GEMV of decode (gemv_int_tile.cu).
struct IntTileOptions {
  // CTAs wanted per SM: a matrix with many tiles spreads each tile over the fewest warps that
  // still give this many CTAs per SM (8 warps per CTA, so at most 8). Never compared against
  // other values in a recorded run.
  int ctas_per_sm = 2;
  // Matrices with few tiles and long rows (Qwen3-4B's o and down) run 16 warps per tile as a
  // cluster of 4 CTAs of 4 warps (true), or as one 16-warp CTA (false). Measured within noise
  // of each other (bench/results/gpu_qwen3_4b_h200.md: +1 % int2, -1 % int4); clusters kept
  // for the even spread over the SMs.
  bool cluster = true;
};

struct KernelOptions {
  PrefillAttentionKernel prefill_attention = PrefillAttentionKernel::kWgmma64;
  Nvfp4Gemm nvfp4_gemm = Nvfp4Gemm::kAuto;
  IntTileOptions int_tile;
  // Decode steps run as one persistent kernel (persistent_decode.h) where the model and the
  // step allow it (CudaDecoderModel::SupportsPersistentDecode: bf16 and int4/int2 tile linears,
  // up to kPdMaxRows sequences, no taps or verification rows), else kernel per op. Off until it
  // covers the formats and wins its measurements (bench/results/gpu_persistent_decode_h200.json).
  bool persistent_decode = false;
  // CTAs of the persistent kernel per SM: 1 (8 warps, up to 252 registers a thread, the deepest
  // weight rings) or 2 (16 warps a SM streaming, 128 registers a thread, 6 KiB rings). The
  // kernel-per-op GEMVs stream from 32 warps a SM; bench/gpu_stream_probe.cu measures what the
  // warp count is worth. Never compared in a recorded run yet.
  int persistent_ctas_per_sm = 1;
};

// OK, or InvalidArgument naming the bad field, its value and what it may be.
absl::Status ValidateKernelOptions(const KernelOptions& options);

// The options described by `spec` (the text form above; empty: the defaults), validated.
// InvalidArgument names the bad pair and lists the keys or values allowed.
absl::StatusOr<KernelOptions> ParseKernelOptions(std::string_view spec);

// The text form of `options`, every key (for logs; ParseKernelOptions reads it back).
std::string KernelOptionsToString(const KernelOptions& options);

const char* PrefillAttentionKernelName(PrefillAttentionKernel kernel);
const char* Nvfp4GemmName(Nvfp4Gemm gemm);

}  // namespace dq::cuda
