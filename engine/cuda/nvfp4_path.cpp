#include "engine/cuda/nvfp4_path.h"

#include <cuda_runtime.h>

#include "engine/cuda/cuda_check.h"

namespace dq::cuda {

const char* Nvfp4PathName(Nvfp4Path path) {
  return path == Nvfp4Path::kNativeFp4 ? "native FP4 (cuBLASLt block-scaled E2M1)"
                                       : "unpack to bf16 (cuBLASLt bf16)";
}

Nvfp4Path ResolveNvfp4Path(int cc_major, Nvfp4Gemm choice) {
  switch (choice) {
    case Nvfp4Gemm::kNative:
      return Nvfp4Path::kNativeFp4;
    case Nvfp4Gemm::kUnpack:
      return Nvfp4Path::kUnpackBf16;
    case Nvfp4Gemm::kAuto:
      break;
  }
  return cc_major >= 10 ? Nvfp4Path::kNativeFp4 : Nvfp4Path::kUnpackBf16;
}

Nvfp4Path Nvfp4PathForCurrentDevice(Nvfp4Gemm choice) {
  int device = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return ResolveNvfp4Path(major, choice);
}

}  // namespace dq::cuda
