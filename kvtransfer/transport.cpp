#include "kvtransfer/transport.h"

#include <array>
#include <chrono>
#include <thread>

#include "absl/strings/str_join.h"
#include "common/status.h"
#include "kvtransfer/local_transport.h"
#ifdef DQ_HAVE_NCCL
#include "kvtransfer/nccl_transport.h"
#endif
#include "kvtransfer/tcp_transport.h"
#include "kvtransfer/ucx_transport.h"

namespace dq::kvtransfer {

std::span<const std::string_view> TransportKinds() {
  static constexpr std::array<std::string_view, 4> kKinds = {"local", "tcp", "ucx", "nccl"};
  return kKinds;
}

absl::StatusOr<std::unique_ptr<Transport>> CreateTransport(const TransportConfig& config) {
  if (config.io_timeout_ms <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("kvtransfer io_timeout_ms must be > 0 (got ",
                                                   config.io_timeout_ms, "); 10000 is typical"));
  }
  if (config.kind == "local") return std::make_unique<LocalTransport>();
  if (config.kind == "tcp") return TcpTransport::Create(config);
  if (config.kind == "ucx") {
#ifdef DQ_HAVE_UCX
    return UcxTransport::Create(config);
#else
    return absl::UnimplementedError(
        "this build has no UCX backend; install libucx-dev and rebuild, or use kind 'tcp'");
#endif
  }
  if (config.kind == "nccl") {
#ifdef DQ_HAVE_NCCL
    return NcclTransport::Create(config);
#else
    return absl::UnimplementedError(
        "this binary was built without CUDA/NCCL, so it has no nccl KV transport; build with "
        "-DDQ_ENABLE_CUDA=ON (the release-cuda preset) on a machine with NCCL, or use kind 'tcp'");
#endif
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown kvtransfer kind '", config.kind, "'; choose one of: ",
                   absl::StrJoin(TransportKinds(), ", ", [](std::string* out, std::string_view k) {
                     out->append(k.data(), k.size());
                   })));
}

absl::Status WaitForTransfer(Transport& transport, TransferId id, int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  // Start with short sleeps (a KV layer lands in well under a millisecond on a fast link) and
  // back off so that a slow transfer does not burn a core.
  auto sleep = std::chrono::microseconds(20);
  for (;;) {
    TransferStatus status = transport.Poll(id);
    if (status.state == TransferState::kDone) return absl::OkStatus();
    if (status.state == TransferState::kFailed) return status.error;
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("transfer ", id, " still pending after ",
                                                      timeout_ms,
                                                      " ms; poll it again or check the peer"));
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(2000));
  }
}

}  // namespace dq::kvtransfer
