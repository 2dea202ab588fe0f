// CUDA and NCCL helpers of the nccl backend (CUDA builds only): statuses from error codes, a
// non-blocking 2-rank communicator, and waits that poll instead of blocking so that every wait
// has a deadline and can notice a dead peer.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dq::kvtransfer::nccl {

using Clock = std::chrono::steady_clock;

// Bringing a communicator up (ncclCommInitRankConfig, then the first send/recv's channel
// connection) takes seconds, not a transfer's milliseconds: those waits get at least this long.
inline constexpr int kMinSetupMs = 30000;
inline int SetupTimeoutMs(int io_timeout_ms) { return std::max(io_timeout_ms, kMinSetupMs); }

absl::Status CudaStatus(cudaError_t e, std::string_view what);
// `comm` (may be null) adds NCCL's last error text, which names the real cause.
absl::Status NcclStatus(ncclResult_t r, ncclComm_t comm, std::string_view what);

#define DQ_NCCL_CUDA_RETURN_IF_ERROR(expr, what)                       \
  do {                                                                 \
    const cudaError_t dq_nccl_cuda_e = (expr);                         \
    if (dq_nccl_cuda_e != cudaSuccess) {                               \
      return ::dq::kvtransfer::nccl::CudaStatus(dq_nccl_cuda_e, what); \
    }                                                                  \
  } while (0)

// Called while a wait polls; a non-OK status ends the wait with it (e.g. the peer hung up).
using Interrupt = std::function<absl::Status()>;

// Polls ncclCommGetAsyncError until `comm` leaves ncclInProgress: OK once it is ready, NCCL's
// error, DeadlineExceeded at `deadline`, or what `interrupt` returns.
absl::Status WaitComm(ncclComm_t comm, Clock::time_point deadline, const Interrupt& interrupt,
                      std::string_view what);

// Starts a non-blocking 2-rank communicator on the current device (ncclConfig_t blocking = 0, so
// that ncclCommAbort can always end it); WaitComm tells when it is up. The comm is returned even
// while it is still connecting; on error it is already aborted.
absl::StatusOr<ncclComm_t> StartComm(const ncclUniqueId& id, int rank);

// Aborts a communicator (frees its resources, ends its kernels); null is fine.
void AbortComm(ncclComm_t comm);

// Waits until every operation queued on `stream` has ended, polling, up to `deadline`.
absl::Status WaitStreamIdle(cudaStream_t stream, Clock::time_point deadline);

// "0000:19:00.0".
absl::StatusOr<std::string> PciBusId(int device);

// OK when [ptr, ptr + bytes) is CUDA device memory of `device` (checked at both ends);
// InvalidArgument saying what it is otherwise.
absl::Status CheckDeviceRange(const void* ptr, uint64_t bytes, int device);

// Sets the calling thread's device for its lifetime, then restores the previous one.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  absl::Status status_;
};

}  // namespace dq::kvtransfer::nccl
