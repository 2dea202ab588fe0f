// A linear layer on the device, in whichever format its weights are stored, and the one entry
// point every model layer calls: y = x · Wᵀ. Activations are bf16 [m, in] row-major; the output
// is bf16 [m, out], or fp32 [m, out] accumulated into (the residual stream).
//
// Dispatch (LinearForward): bf16 weights → cuBLASLt bf16; fp8 W8A8 → per-token E4M3 activation
// quantization + cuBLASLt FP8 with per-channel × per-token scales applied exactly; nvfp4 W4A4 →
// NVFP4 activation quantize-dequantize + block-scaled weights unpacked to a tensor-core format,
// reproducing the CPU reference's numerics (global scales in the epilogue); weight-only formats
// (intN, nvfp4a16, lutN, GGUF blocks) → the weight_only.h kernels for small m (decode), and a
// dequantize-to-bf16 + cuBLASLt path for large m (prefill on decode weights).
//
// Numerics against the CPU reference (engine/cpu/cpu_ops.cpp MatMul): every quantized operand
// (fp8 and nvfp4 weights, their activations) equals the CPU's exactly; products are exact on
// the tensor cores and accumulate in fp32 in another order, and the bf16 output is one more
// rounding. Plain F32/F16 weights are rounded to bf16 at upload (bf16 ones are used as stored).
//
// NVFP4 W4A4 on Hopper (no FP4 tensor cores): each forward unpacks the packed weights into a
// bf16 scratch matrix (E2M1 x block scale, exact) and runs a bf16 GEMM with the global scales as
// alpha (static activation scale) or in a per-token epilogue (dynamic). Keeping the layer
// packed costs one pass over 0.56 + 2 bytes per weight per call (small beside the GEMM from
// m ~ 1K tokens) and keeps the device footprint at NVFP4's 0.56 bytes per weight instead of 2.
//
// NVFP4 W4A4 on Blackwell (kNvfp4W4A4Native, chosen per device in nvfp4_path.h): activations
// are quantized per token to packed E2M1 + UE4M3 block scales (the same codes as above and as
// the CPU's), the weights' block scales are stored in cuBLASLt's tiled layout at upload, and
// cuBLASLt's block-scaled FP4 GEMM (CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3) multiplies them;
// the global scales go into alpha (static) or the per-token epilogue (dynamic) as above. Where
// cuBLASLt has no FP4 kernel for a call (a Hopper forced onto this path by the kernel option
// nvfp4_gemm=native, or an unsupported shape), the same stored operands are unpacked to bf16.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/kernel_options.h"
#include "engine/cuda/nvfp4_path.h"
#include "engine/cuda/weight_only.h"
#include "engine/model/linear_weight.h"

namespace dq::cuda {

enum class LinearKind { kBf16, kFp8, kNvfp4W4A4, kNvfp4W4A4Native, kWeightOnly };
// Whether a linear of this kind quantizes its input activations (fp8 W8A8, nvfp4 W4A4).
inline bool QuantizesActivations(LinearKind k) {
  return k == LinearKind::kFp8 || k == LinearKind::kNvfp4W4A4 || k == LinearKind::kNvfp4W4A4Native;
}

// Owned by the model; immutable after UploadLinear.
struct DeviceLinear {
  LinearKind kind = LinearKind::kBf16;
  int64_t out_features = 0;
  int64_t in_features = 0;
  // kBf16: bf16 [out, in]. kFp8: E4M3 [out, in]. kNvfp4W4A4(Native): packed E2M1 [out, in / 2].
  DeviceBuffer weight;
  // kFp8: f32 [out] per-channel scales. kNvfp4W4A4: E4M3 [out, in / 16] block scales, row-major.
  // kNvfp4W4A4Native: the same scales in cuBLASLt's tiled layout (nvfp4_scale_layout.h).
  DeviceBuffer weight_scale;
  // kNvfp4W4A4(Native): the weight's global scale (dequantized w = e2m1 * block_scale / global) and
  // the activations' static global scale (0: dynamic per row), as the CPU reference uses them.
  float weight_global_scale = 1.0f;
  float act_global_scale = 0.0f;
  // kWeightOnly.
  WeightOnlyWeights weight_only;

  // Device bytes of the weights (what one pass over the layer reads).
  int64_t device_bytes() const;
};

// Copies (and, where the device layout differs, repacks) a CPU weight to the device, keeping
// its format and compute mode. Errors: a dtype/scheme/mode with no device implementation
// (the message names it and lists what is supported).
// NVFP4 W4A4 layers take the path `kernels.nvfp4_gemm` gives on the current device
// (Nvfp4PathForCurrentDevice); the model passes its CudaBackendOptions::kernels.
absl::StatusOr<DeviceLinear> UploadLinear(const LinearWeight& w, const KernelOptions& kernels = {});
// The same with the NVFP4 W4A4 path given (tests: both paths on one device).
absl::StatusOr<DeviceLinear> UploadLinear(const LinearWeight& w, Nvfp4Path nvfp4_path);

struct LinearArgs {
  const __nv_bfloat16* x = nullptr;  // [m, in_features]
  int64_t m = 0;
  // Exactly one of: bf16 output [m, out] (overwritten), or fp32 [m, out] accumulated into.
  __nv_bfloat16* y_bf16 = nullptr;
  float* y_accumulate = nullptr;
  // Compute each output row independently of m (the GEMV kernels, 8 rows per launch) where the
  // kind has them (bf16, weight-only): speculative verification sets it so that its rows equal
  // decode steps bit for bit. Costly for bf16 beyond a few rows (cuBLASLt is faster there).
  bool row_invariant = false;
  // Instead of x, for a linear that FusesSwiGlu: x = silu(gate) * up, computed by the
  // activation quantizer (act_quant.h SwiGluQuantizeFp8PerToken), never stored in bf16. The same
  // result as SwiGluForward into x, bit for bit.
  struct SwiGlu {
    const __nv_bfloat16* gate = nullptr;  // [m, stride], 16-byte aligned rows
    const __nv_bfloat16* up = nullptr;
    int64_t stride = 0;
  } swiglu;
};

// Capability query: whether LinearArgs::swiglu may stand in for x (FP8 W8A8 linears whose input
// width is a multiple of 8).

// cuBLASLt handle, workspace and scratch buffers (activation quantization, dequantized weight
// tiles), grown on demand outside graph capture and reused. One per stream; not thread-safe.
class LinearContext {
 public:
  LinearContext();
  ~LinearContext();
  LinearContext(const LinearContext&) = delete;
  LinearContext& operator=(const LinearContext&) = delete;

  // Preallocates scratch for layers up to [max_m, max_in] x [max_out] so that later forwards
  // (and CUDA graph capture) never allocate: quantized activations (2 * max_m * max_in bytes;
  // packed NVFP4 ones with their tiled block scales, and on a device without FP4 tensor cores
  // that runs the native path, their bf16 image too),
  // one unpacked bf16 weight (2 * max_out * max_in; used by nvfp4 and weight-only prefill only,
  // so max_out may leave out bf16 layers such as lm_head), and an fp32 epilogue tile of at most
  // 64 MiB. A forward that needs more outside capture grows the buffer; inside, it aborts.
  void Reserve(int64_t max_m, int64_t max_in, int64_t max_out);

  // The model's kernel options (CudaBackendOptions::kernels; default: KernelOptions{}): the int
  // tile GEMV's choices reach the weight-only GEMVs (WeightOnlyGemvArgs::int_tile), and Reserve
  // sizes the NVFP4 scratch for the path nvfp4_gemm gives. Call before Reserve; the layers must
  // have been uploaded with the same options (UploadLinear).
  void SetOptions(const KernelOptions& options);
  const KernelOptions& options() const;

  // Tests: route fp8 through the fp32-output GEMM + scale epilogue even where cuBLASLt's
  // outer-vector scaling is available (both paths must agree with the CPU reference).
  void ForceScaleEpilogueForTesting(bool on);

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Capability query: whether LinearArgs::swiglu may stand in for x (FP8 W8A8 linears whose input
// width is a multiple of 8).
inline bool FusesSwiGlu(const DeviceLinear& w) {
  return w.kind == LinearKind::kFp8 && w.in_features % 8 == 0;
}

// y = x · Wᵀ on `stream`. Preconditions (asserted): m >= 1, exactly one output, scratch
// reserved for these sizes when called inside graph capture.
void LinearForward(const DeviceLinear& w, const LinearArgs& args, LinearContext& ctx,
                   cudaStream_t stream);

}  // namespace dq::cuda
