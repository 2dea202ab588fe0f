// How the CPU backend computes the linears of decode steps ([prefill] / [decode] cpu_matmul,
// dq-prefill / dq-decode / dqserve generate / dq-bench-cpu --cpu-matmul). One list, checked
// before any weight is read.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dq {

// "q8" (the default): decode steps quantize the inputs of GGUF Q4_1 / Q8_0 linears to 8-bit
// blocks and use integer dots (engine/cpu/q8_packed.h, docs/fidelity.md for its accuracy);
// prefill and other weights stay fp32. "exact": every linear on the fp32 reference path.
enum class CpuMatmul { kQ8, kExact };

inline constexpr std::array<std::string_view, 2> kCpuMatmulModes = {"q8", "exact"};
inline constexpr std::string_view kDefaultCpuMatmul = "q8";
// The --cpu-matmul flag's help text, the same in every binary.
inline constexpr char kCpuMatmulHelp[] =
    "cpu: q8 (decode steps quantize the inputs of GGUF Q4_1 / Q8_0 linears to 8-bit blocks and "
    "use integer dots, as llama.cpp does; docs/fidelity.md) or exact (the fp32 reference)";

// InvalidArgument naming the choices for a mode not in kCpuMatmulModes.
inline absl::StatusOr<CpuMatmul> ParseCpuMatmul(std::string_view mode) {
  if (mode == "q8") return CpuMatmul::kQ8;
  if (mode == "exact") return CpuMatmul::kExact;
  return absl::InvalidArgumentError(absl::StrCat(
      "cpu matmul '", std::string(mode),
      "' is not one of q8 (8-bit activations and integer dots, the default) or exact (the fp32 "
      "reference)"));
}

}  // namespace dq
