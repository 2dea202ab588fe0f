// The formats an lm_head may be quantized to at load ([decode] lm_head, dq-decode --lm-head,
// dqserve generate --lm-head; engine/quant/requantize.h does it). One list, checked before any
// weight is read.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dq {

// "bf16": the checkpoint's own lm_head, whatever it stores (the default). The others are
// weight-only schemes: int8, int4, int3, int2 (groups of 128 values, else the largest of 64 and
// 32 that divides the hidden size) and nvfp4 (NVFP4A16).
inline constexpr std::array<std::string_view, 6> kLmHeadFormats = {"bf16", "int8", "int4",
                                                                   "int3", "int2", "nvfp4"};

// Whether `format` keeps the checkpoint's lm_head ("bf16" or empty).
inline bool KeepsStoredLmHead(std::string_view format) {
  return format.empty() || format == "bf16";
}

// InvalidArgument naming the choices for a format not in kLmHeadFormats.
inline absl::Status CheckLmHeadFormat(std::string_view format) {
  if (format.empty()) return absl::OkStatus();
  for (std::string_view f : kLmHeadFormats) {
    if (format == f) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("lm_head format '", std::string(format),
                   "' is not one of bf16 (the checkpoint's own), int8, int4, int3, int2, nvfp4"));
}

}  // namespace dq
