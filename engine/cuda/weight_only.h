// Weight-only quantized matrices on the device, and the decode kernels that read them: each
// weight byte is read once and dequantized in registers, activations stay bf16, accumulation in
// fp32. Formats: intN (N = 2, 3, 4, 8; asymmetric, group 32/64/128), nvfp4 (NVFP4A16), lut3 /
// lut2, and GGUF blocks (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, ...), each matching its CPU reference
// (engine/quant/) exactly up to fp32 summation order.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/dtype.h"
#include "common/status.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/kernel_options.h"
#include "engine/model/linear_weight.h"

namespace dq::cuda {

enum class WeightOnlyFormat { kNone, kInt, kNvfp4, kLut, kGguf };

// The device copy of one matrix. Layouts are private to weight_only*.cu (they may be repacked
// for coalesced loads); only the functions below read them.
struct WeightOnlyWeights {
  WeightOnlyFormat format = WeightOnlyFormat::kNone;
  int bits = 0;                   // kInt / kLut
  int group_size = 0;             // kInt
  DType gguf_type = DType::kF32;  // kGguf
  int64_t out_features = 0;
  int64_t in_features = 0;
  float global_scale = 1.0f;  // kNvfp4 / kLut per-tensor scale
  DeviceBuffer packed;        // quantized values
  DeviceBuffer scales;        // per group / block scales (format-specific dtype)
  DeviceBuffer aux;           // zero points, mins, ... (format-specific)

  int64_t device_bytes() const { return packed.bytes() + scales.bytes() + aux.bytes(); }
};

// Whether `w` (codec scheme or GGUF dtype, in weight-only mode) has a device implementation.
bool SupportsWeightOnly(const LinearWeight& w);

// Uploads (repacking if needed). Errors name the unsupported scheme/dtype.
absl::StatusOr<WeightOnlyWeights> UploadWeightOnly(const LinearWeight& w);

struct WeightOnlyGemvArgs {
  const __nv_bfloat16* x = nullptr;  // [m, in], 16-byte aligned
  int m = 1;                         // 1..8
  __nv_bfloat16* y_bf16 = nullptr;   // [m, out] overwritten, or
  float* y_accumulate = nullptr;     // [m, out] fp32 accumulated into
  // The int4 / int2 tile GEMV's kernel choices (KernelOptions::int_tile; other formats ignore
  // them).
  IntTileOptions int_tile;
};

// y = x · Wᵀ for m <= 8 rows (decode batches). Each weight byte is read once and reused for
// all m rows; the kernel is launched with programmatic dependent launch (it loads its first
// weights before waiting on the previous kernel in the stream, and reads x / writes y only
// after that wait). Aborts on m outside 1..8 or not exactly one output.
void WeightOnlyGemv(const WeightOnlyWeights& w, const WeightOnlyGemvArgs& args,
                    cudaStream_t stream);

// The same kernel on a plain bf16 [out, in] device matrix (lm_head, bf16 decode baseline);
// in_features % 8 == 0, weight 16-byte aligned.
void Bf16Gemv(const __nv_bfloat16* weight, int64_t out_features, int64_t in_features,
              const WeightOnlyGemvArgs& args, cudaStream_t stream);

// Writes the whole matrix dequantized, bf16 [out, in] row-major (prefill on weight-only weights
// runs a bf16 GEMM on this).
void DequantizeToBf16(const WeightOnlyWeights& w, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace dq::cuda
