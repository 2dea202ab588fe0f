#include "engine/cuda/nvfp4_path.h"

#include <cuda_runtime.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "engine/cuda/cuda_check.h"

namespace dq::cuda {

const char* Nvfp4PathName(Nvfp4Path path) {
  return path == Nvfp4Path::kNativeFp4 ? "native FP4 (cuBLASLt block-scaled E2M1)"
                                       : "unpack to bf16 (cuBLASLt bf16)";
}

absl::StatusOr<Nvfp4Path> ResolveNvfp4Path(int cc_major, const char* env) {
  const std::string v = env != nullptr ? env : "";
  if (v.empty()) return cc_major >= 10 ? Nvfp4Path::kNativeFp4 : Nvfp4Path::kUnpackBf16;
  if (v == "native") return Nvfp4Path::kNativeFp4;
  if (v == "unpack") return Nvfp4Path::kUnpackBf16;
  return absl::InvalidArgumentError(
      absl::StrCat("DQ_NVFP4_GEMM='", v,
                   "' is not a known NVFP4 W4A4 GEMM path; set it to 'native' or 'unpack', or "
                   "unset it to choose by compute capability"));
}

namespace {

std::mutex mu;
std::map<int, Nvfp4Path> chosen;  // by device, under mu

}  // namespace

std::optional<Nvfp4Path> Nvfp4PathIfChosen() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mu);
  auto it = chosen.find(device);
  if (it == chosen.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<Nvfp4Path> Nvfp4PathForCurrentDevice() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = chosen.find(device); it != chosen.end()) return it->second;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const char* env = std::getenv("DQ_NVFP4_GEMM");
  DQ_ASSIGN_OR_RETURN(const Nvfp4Path path, ResolveNvfp4Path(prop.major, env));
  spdlog::info("nvfp4 w4a4 on device {} ({}, compute capability {}.{}): {}{}", device, prop.name,
               prop.major, prop.minor, Nvfp4PathName(path),
               env != nullptr && *env != '\0' ? " (set by DQ_NVFP4_GEMM)" : "");
  chosen.emplace(device, path);
  return path;
}

}  // namespace dq::cuda
