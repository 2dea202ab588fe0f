// Where a byte range lives (host or CUDA device memory), for backends that move both: ucx
// registers device memory with UCX's CUDA memory type. In builds without CUDA every range is host
// memory (such a build cannot have made device memory).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace dq::kvtransfer {

struct MemoryLocation {
  bool device = false;   // CUDA device memory (cudaMalloc); false: host (pageable or pinned)
  int cuda_device = -1;  // the device that owns it, when `device`
};

// Whether this build can see CUDA memory at all (DQ_ENABLE_CUDA).
bool BuiltWithCuda();

// Classifies [ptr, ptr + bytes) with cudaPointerGetAttributes at both ends. InvalidArgument when
// the range starts in device memory but does not end in the same device's memory (or the other
// way round): a region must be one kind of memory.
absl::StatusOr<MemoryLocation> LocateMemory(const void* ptr, uint64_t bytes);

// Makes `device` the calling thread's current CUDA device for the object's lifetime (UCX's CUDA
// transports work on the current device's context); a no-op for device < 0 or builds without CUDA.
class ScopedCudaDevice {
 public:
  explicit ScopedCudaDevice(int device);
  ~ScopedCudaDevice();
  ScopedCudaDevice(const ScopedCudaDevice&) = delete;
  ScopedCudaDevice& operator=(const ScopedCudaDevice&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace dq::kvtransfer
