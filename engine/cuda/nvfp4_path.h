// Which GEMM runs an NVFP4 W4A4 layer on a device, decided at upload (UploadLinear) from the
// kernel option KernelOptions::nvfp4_gemm (kernel_options.h):
//   kNativeFp4:  auto on compute capability >= 10.0 (Blackwell), or forced ("native"): packed
//                E2M1 activations and weights with UE4M3 block scales straight into cuBLASLt's
//                block-scaled FP4 GEMM.
//   kUnpackBf16: auto on earlier devices (Hopper has no FP4 tensor cores), or forced ("unpack"):
//                weights unpacked to bf16 per call, activations quantize-dequantized to bf16,
//                bf16 GEMM.
// Both reproduce the CPU reference's quantized operands exactly (see linear.h). A forced native
// path on a device whose cuBLASLt has no FP4 kernel still runs, on the same stored operands
// unpacked to bf16 (logged once), so the native path's data preparation is testable on Hopper.
#pragma once

#include "engine/cuda/kernel_options.h"

namespace dq::cuda {

enum class Nvfp4Path { kUnpackBf16, kNativeFp4 };

const char* Nvfp4PathName(Nvfp4Path path);

// The rule, as a pure function of the device's compute capability and the option.
Nvfp4Path ResolveNvfp4Path(int cc_major, Nvfp4Gemm choice);

// The path for the current CUDA device (its compute capability) under `choice`.
Nvfp4Path Nvfp4PathForCurrentDevice(Nvfp4Gemm choice);

}  // namespace dq::cuda
