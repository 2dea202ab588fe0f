// Which GEMM runs an NVFP4 W4A4 layer on a device, decided once per device at model load:
//   kNativeFp4:  compute capability >= 10.0 (Blackwell): packed E2M1 activations and weights
//                with UE4M3 block scales straight into cuBLASLt's block-scaled FP4 GEMM.
//   kUnpackBf16: earlier devices (Hopper has no FP4 tensor cores): weights unpacked to bf16 per
//                call, activations quantize-dequantized to bf16, bf16 GEMM.
// Both reproduce the CPU reference's quantized operands exactly (see linear.h).
// DQ_NVFP4_GEMM=native|unpack overrides the choice (testing, A/B). A forced native path on a
// device whose cuBLASLt has no FP4 kernel still runs, on the same stored operands unpacked to
// bf16 (logged once), so the native path's data preparation is testable on Hopper.
#pragma once

#include <optional>

#include "common/status.h"

namespace dq::cuda {

enum class Nvfp4Path { kUnpackBf16, kNativeFp4 };

const char* Nvfp4PathName(Nvfp4Path path);

// The rule, as a pure function: `env` is DQ_NVFP4_GEMM's value (null or empty: unset).
// Errors: an env value other than "native" / "unpack".
absl::StatusOr<Nvfp4Path> ResolveNvfp4Path(int cc_major, const char* env);

// The path for the current CUDA device: resolved on the first call for that device (logged with
// the device's name and compute capability), cached afterwards. Thread-safe.
absl::StatusOr<Nvfp4Path> Nvfp4PathForCurrentDevice();

// The path already chosen for the current device (an NVFP4 W4A4 layer was uploaded), if any;
// decides and logs nothing.
std::optional<Nvfp4Path> Nvfp4PathIfChosen();

}  // namespace dq::cuda
