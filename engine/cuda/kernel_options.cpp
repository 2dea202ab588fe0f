#include "engine/cuda/kernel_options.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"

namespace dq::cuda {
namespace {

constexpr int kMaxCtasPerSm = 8;  // 8-warp CTAs: 2048 threads per SM
constexpr const char* kKeys =
    "prefill_attention, nvfp4_gemm, int_tile_ctas_per_sm, int_tile_cluster, persistent_decode, "
    "persistent_ctas_per_sm";

absl::Status BadValue(std::string_view key, std::string_view value, const std::string& allowed) {
  return absl::InvalidArgumentError(absl::StrCat("kernel option ", std::string(key), "=",
                                                 std::string(value), ": the value must be ",
                                                 allowed, " (engine/cuda/kernel_options.h)"));
}

std::string_view Strip(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// The comma-separated pieces of `s`, stripped, empty ones left out.
std::vector<std::string_view> SplitPairs(std::string_view s) {
  std::vector<std::string_view> out;
  while (true) {
    const size_t comma = s.find(',');
    const std::string_view piece = Strip(s.substr(0, comma));
    if (!piece.empty()) out.push_back(piece);
    if (comma == std::string_view::npos) return out;
    s.remove_prefix(comma + 1);
  }
}

}  // namespace

const char* PrefillAttentionKernelName(PrefillAttentionKernel kernel) {
  switch (kernel) {
    case PrefillAttentionKernel::kWgmma64:
      return "wg64pp";
    case PrefillAttentionKernel::kWgmma128:
      return "wg128pp";
  }
  return "?";
}

const char* Nvfp4GemmName(Nvfp4Gemm gemm) {
  switch (gemm) {
    case Nvfp4Gemm::kAuto:
      return "auto";
    case Nvfp4Gemm::kNative:
      return "native";
    case Nvfp4Gemm::kUnpack:
      return "unpack";
  }
  return "?";
}

absl::Status ValidateKernelOptions(const KernelOptions& o) {
  const int attention = static_cast<int>(o.prefill_attention);
  if (attention < 0 || attention > static_cast<int>(PrefillAttentionKernel::kWgmma128)) {
    return BadValue("prefill_attention", absl::StrCat("(enum value ", attention, ")"),
                    "wg64pp or wg128pp");
  }
  const int gemm = static_cast<int>(o.nvfp4_gemm);
  if (gemm < 0 || gemm > static_cast<int>(Nvfp4Gemm::kUnpack)) {
    return BadValue("nvfp4_gemm", absl::StrCat("(enum value ", gemm, ")"),
                    "auto, native or unpack");
  }
  if (o.int_tile.ctas_per_sm < 1 || o.int_tile.ctas_per_sm > kMaxCtasPerSm) {
    return BadValue("int_tile_ctas_per_sm", absl::StrCat(o.int_tile.ctas_per_sm),
                    absl::StrCat("1 to ", kMaxCtasPerSm, " (default 2)"));
  }
  if (o.persistent_ctas_per_sm < 1 || o.persistent_ctas_per_sm > 2) {
    return BadValue("persistent_ctas_per_sm", absl::StrCat(o.persistent_ctas_per_sm),
                    "1 (default) or 2");
  }
  return absl::OkStatus();
}

absl::StatusOr<KernelOptions> ParseKernelOptions(std::string_view spec) {
  KernelOptions o;
  for (const std::string_view pair : SplitPairs(spec)) {
    const size_t eq = pair.find('=');
    const std::string_view key = Strip(pair.substr(0, eq));
    const std::string_view value =
        eq == std::string_view::npos ? std::string_view() : Strip(pair.substr(eq + 1));
    if (key.empty() || value.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("kernel options '", std::string(spec), "': '",
                                                     std::string(pair),
                                                     "' is not key=value; the keys are ", kKeys));
    }
    if (key == "prefill_attention") {
      if (value == "wg64pp") {
        o.prefill_attention = PrefillAttentionKernel::kWgmma64;
      } else if (value == "wg128pp") {
        o.prefill_attention = PrefillAttentionKernel::kWgmma128;
      } else {
        return BadValue(key, value, "wg64pp (default) or wg128pp");
      }
    } else if (key == "nvfp4_gemm") {
      if (value == "auto") {
        o.nvfp4_gemm = Nvfp4Gemm::kAuto;
      } else if (value == "native") {
        o.nvfp4_gemm = Nvfp4Gemm::kNative;
      } else if (value == "unpack") {
        o.nvfp4_gemm = Nvfp4Gemm::kUnpack;
      } else {
        return BadValue(key, value, "auto (by compute capability; default), native or unpack");
      }
    } else if (key == "int_tile_ctas_per_sm") {
      if (!absl::SimpleAtoi(std::string(value), &o.int_tile.ctas_per_sm)) {
        return BadValue(key, value, absl::StrCat("an integer from 1 to ", kMaxCtasPerSm));
      }
    } else if (key == "int_tile_cluster") {
      if (value == "on") {
        o.int_tile.cluster = true;
      } else if (value == "off") {
        o.int_tile.cluster = false;
      } else {
        return BadValue(key, value, "on (default) or off");
      }
    } else if (key == "persistent_decode") {
      if (value == "on") {
        o.persistent_decode = true;
      } else if (value == "off") {
        o.persistent_decode = false;
      } else {
        return BadValue(key, value, "off (default) or on");
      }
    } else if (key == "persistent_ctas_per_sm") {
      if (!absl::SimpleAtoi(std::string(value), &o.persistent_ctas_per_sm)) {
        return BadValue(key, value, "1 (default) or 2");
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("kernel options '", std::string(spec), "': unknown key '", std::string(key),
                       "'; the keys are ", kKeys, " (engine/cuda/kernel_options.h)"));
    }
  }
  DQ_RETURN_IF_ERROR(ValidateKernelOptions(o));
  return o;
}

std::string KernelOptionsToString(const KernelOptions& o) {
  return absl::StrCat("prefill_attention=", PrefillAttentionKernelName(o.prefill_attention),
                      ",nvfp4_gemm=", Nvfp4GemmName(o.nvfp4_gemm),
                      ",int_tile_ctas_per_sm=", o.int_tile.ctas_per_sm,
                      ",int_tile_cluster=", o.int_tile.cluster ? "on" : "off",
                      ",persistent_decode=", o.persistent_decode ? "on" : "off",
                      ",persistent_ctas_per_sm=", o.persistent_ctas_per_sm);
}

}  // namespace dq::cuda
