#include "kvtransfer/nccl_cuda.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dq::kvtransfer::nccl {
namespace {

// Polling interval of the waits here: short against a KV layer's transfer time, long enough not
// to burn a core.
constexpr auto kPollInterval = std::chrono::microseconds(50);

std::string_view MemoryKind(cudaMemoryType type) {
  switch (type) {
    case cudaMemoryTypeHost:
      return "page-locked host memory";
    case cudaMemoryTypeDevice:
      return "device memory";
    case cudaMemoryTypeManaged:
      return "managed memory";
    default:
      return "pageable host memory";
  }
}

}  // namespace

absl::Status CudaStatus(cudaError_t e, std::string_view what) {
  return absl::InternalError(absl::StrCat("kvtransfer nccl: ", std::string(what), ": ",
                                          cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

absl::Status NcclStatus(ncclResult_t r, ncclComm_t comm, std::string_view what) {
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  const absl::StatusCode code = r == ncclRemoteError || r == ncclSystemError
                                    ? absl::StatusCode::kUnavailable
                                    : absl::StatusCode::kInternal;
  return absl::Status(
      code, absl::StrCat("kvtransfer nccl: ", std::string(what), ": ", ncclGetErrorString(r),
                         last != nullptr && *last ? absl::StrCat(" (", last, ")") : std::string()));
}

absl::Status WaitComm(ncclComm_t comm, Clock::time_point deadline, const Interrupt& interrupt,
                      std::string_view what) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return NcclStatus(r, comm, what);
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return NcclStatus(state, comm, what);
    if (interrupt) DQ_RETURN_IF_ERROR(interrupt());
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("kvtransfer nccl: ", std::string(what), " did not finish in time"));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

absl::StatusOr<ncclComm_t> StartComm(const ncclUniqueId& id, int rank) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, 2, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    absl::Status s = NcclStatus(r, comm, "creating the communicator");
    AbortComm(comm);
    return s;
  }
  return comm;
}

void AbortComm(ncclComm_t comm) {
  if (comm != nullptr) ncclCommAbort(comm);
}

absl::Status WaitStreamIdle(cudaStream_t stream, Clock::time_point deadline) {
  for (;;) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) return CudaStatus(e, "waiting for the transfer stream");
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError("kvtransfer nccl: the transfer stream did not drain");
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

absl::StatusOr<std::string> PciBusId(int device) {
  char bus[64] = {};
  DQ_NCCL_CUDA_RETURN_IF_ERROR(cudaDeviceGetPCIBusId(bus, sizeof(bus), device),
                               absl::StrCat("reading cuda:", device, "'s PCI bus id"));
  return std::string(bus);
}

absl::Status CheckDeviceRange(const void* ptr, uint64_t bytes, int device) {
  const char* ends[2] = {static_cast<const char*>(ptr), static_cast<const char*>(ptr) + bytes - 1};
  for (const char* p : ends) {
    cudaPointerAttributes a{};
    const cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
      cudaGetLastError();  // not sticky; clear it so that later calls do not report it
      return CudaStatus(e, "inspecting a region's memory");
    }
    if (a.type != cudaMemoryTypeDevice || a.device != device) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the nccl transport registers CUDA device memory of cuda:", device, " only; ", bytes,
          " bytes at ", absl::Hex(ptr), " are ", std::string(MemoryKind(a.type)),
          a.type == cudaMemoryTypeDevice ? absl::StrCat(" of cuda:", a.device) : std::string(),
          " (use the tcp or ucx transport for host memory)"));
    }
  }
  return absl::OkStatus();
}

ScopedDevice::ScopedDevice(int device) {
  if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) status_ = CudaStatus(e, absl::StrCat("selecting cuda:", device));
}

ScopedDevice::~ScopedDevice() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

}  // namespace dq::kvtransfer::nccl
