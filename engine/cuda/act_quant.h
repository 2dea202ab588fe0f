// Activation quantizers for the W8A8 and W4A4 linear layers: each reproduces the CPU codec's
// QuantizeActivations (engine/quant/fp8_codec.cpp, nvfp4_codec.cpp) step for step in fp32
// (IEEE division and products, the same amax, scale and rounding rules), so that every
// quantized activation equals the CPU's; only where the result is stored differs:
//   fp8:   the E4M3 codes and the per-token scale s (the CPU's x' = E4M3ToFloat(code) * s).
//   nvfp4: bf16 values E2M1 * E4M3 block scale (exact in bf16: at most 6 significant bits) and
//          the per-token 1 / G_a (the CPU's x' = E2M1 * (s_b / G_a)); the 1 / G_a factor is
//          applied to the GEMM's result.
//   nvfp4 packed: the E2M1 codes and UE4M3 block scales themselves (for FP4 tensor cores).
// One CTA per token row; bf16 input [m, n] row-major.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dq::cuda {

// Per token: s = max(finite |x|) / 448 (FLT_EPSILON when 0), q = E4M3(x / s) (RNE, saturating,
// NaN kept). Writes q [m, n] and s [m].
void QuantizeFp8PerToken(const __nv_bfloat16* x, int64_t m, int64_t n, __nv_fp8_e4m3* q,
                         float* scale, cudaStream_t stream);

// The same for x = silu(gate) * up rounded to bf16, computed here (as SwiGluForward computes it)
// instead of read: the SwiGLU output never goes through memory in bf16. Bit-identical to
// SwiGluForward followed by QuantizeFp8PerToken. Preconditions (asserted): n % 8 == 0, gate,
// up and q 16-byte aligned, in_stride % 8 == 0.
struct SwiGluFp8Args {
  const __nv_bfloat16* gate = nullptr;  // [m, in_stride]: the first n of each row are used
  const __nv_bfloat16* up = nullptr;
  int64_t in_stride = 0;  // 0: n
  int64_t m = 0, n = 0;
  __nv_fp8_e4m3* q = nullptr;  // [m, n]
  float* scale = nullptr;      // [m]
};
void SwiGluQuantizeFp8PerToken(const SwiGluFp8Args& args, cudaStream_t stream);

// NVFP4 quantize-dequantize per token, blocks of 16 (n % 16 == 0). G_a = act_global_scale when
// > 0, else per row (1 / max(amax, FLT_MIN)) * 2688 (1 when not finite). Block scale
// s_b = E4M3(G_a * (block_amax / 6)) (0 -> 0.125), step = s_b / G_a, code = E2M1(x / step).
// Writes xq [m, n] = E2M1(code) * s_b (NaN kept) and inv_global [m] = 1 / G_a (fp32).
void QuantDequantNvfp4(const __nv_bfloat16* x, int64_t m, int64_t n, float act_global_scale,
                       __nv_bfloat16* xq, float* inv_global, cudaStream_t stream);

// NVFP4 quantization per token in stored form, for FP4 GEMMs (Blackwell): the codes that
// QuantDequantNvfp4 dequantizes (and the CPU's PackNvfp4ActivationRow writes), byte for byte.
// NaN activations have no E2M1 code and become +0 here (QuantDequantNvfp4 keeps them).
struct Nvfp4PackedActivations {
  const __nv_bfloat16* x = nullptr;  // [m, n], n % 16 == 0
  int64_t m = 0;
  int64_t n = 0;
  float act_global_scale = 0.0f;  // static G_a, or <= 0: per row from its amax
  // Outputs: packed [m, n / 2] E2M1 (element 2j in the low nibble; 8-byte aligned), UE4M3 block
  // scales in cuBLASLt's tiled layout (TiledScaleBytes(m, n / 16) bytes, padding zeroed; see
  // engine/quant/nvfp4_scale_layout.h) and inv_global [m] = 1 / G_a.
  uint8_t* packed = nullptr;
  uint8_t* tiled_scales = nullptr;
  float* inv_global = nullptr;
};
void QuantizeNvfp4Packed(const Nvfp4PackedActivations& args, cudaStream_t stream);

}  // namespace dq::cuda
