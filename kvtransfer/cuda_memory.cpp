#include "kvtransfer/cuda_memory.h"

#ifdef DQ_KVTRANSFER_CUDA
#include <cuda_runtime.h>
#endif

#include "absl/strings/str_cat.h"

namespace dq::kvtransfer {

#ifdef DQ_KVTRANSFER_CUDA

namespace {

// Host for anything CUDA does not know as device memory (pageable, pinned, or no CUDA at all).
MemoryLocation Locate(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // not sticky, but do not leave it for the caller's next check
    return {};
  }
  if (a.type == cudaMemoryTypeDevice) return {true, a.device};
  return {};
}

}  // namespace

bool BuiltWithCuda() { return true; }

absl::StatusOr<MemoryLocation> LocateMemory(const void* ptr, uint64_t bytes) {
  const MemoryLocation first = Locate(ptr);
  const MemoryLocation last = Locate(static_cast<const char*>(ptr) + (bytes - 1));
  if (first.device != last.device || first.cuda_device != last.cuda_device) {
    return absl::InvalidArgumentError(
        absl::StrCat("a kvtransfer region must be one kind of memory, but its first byte is ",
                     first.device ? absl::StrCat("on cuda:", first.cuda_device) : "host memory",
                     " and its last byte ",
                     last.device ? absl::StrCat("on cuda:", last.cuda_device) : "host memory",
                     "; register one allocation's range"));
  }
  return first;
}

ScopedCudaDevice::ScopedCudaDevice(int device) {
  if (device < 0 || cudaGetDevice(&previous_) != cudaSuccess) {
    previous_ = -1;
    return;
  }
  if (previous_ == device || cudaSetDevice(device) != cudaSuccess) previous_ = -1;
}

ScopedCudaDevice::~ScopedCudaDevice() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

#else  // builds without CUDA: no device memory exists

bool BuiltWithCuda() { return false; }

absl::StatusOr<MemoryLocation> LocateMemory(const void*, uint64_t) { return MemoryLocation{}; }

ScopedCudaDevice::ScopedCudaDevice(int) {}
ScopedCudaDevice::~ScopedCudaDevice() = default;

#endif

}  // namespace dq::kvtransfer
