// Thin POSIX socket helpers for the tcp backend: every wait is bounded by a timeout and can be
// interrupted by a WakeEvent, which is what lets a dead or stalled peer fail a transfer instead
// of hanging it, and lets a transport shut down promptly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dq::kvtransfer {

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release();
  void reset();

 private:
  int fd_ = -1;
};

// A level-triggered event (eventfd): once signalled, every poll that includes it wakes up.
class WakeEvent {
 public:
  WakeEvent();
  int fd() const { return fd_.get(); }
  void Signal();

 private:
  Fd fd_;
};

struct HostPort {
  std::string host;
  uint16_t port = 0;
};
// "host:port" or "[v6]:port".
absl::StatusOr<HostPort> ParseHostPort(std::string_view address);
std::string FormatHostPort(const HostPort& hp);

// A listening socket on bind_address:port (port 0: any free port); *bound_port gets the port.
absl::StatusOr<Fd> Listen(const std::string& bind_address, uint16_t port, uint16_t* bound_port);
// Accepts one pending connection (call after the listener is readable).
absl::StatusOr<Fd> Accept(int listen_fd, std::string* peer);
// Connects with a timeout; the socket comes back with TCP_NODELAY set.
absl::StatusOr<Fd> Connect(const HostPort& peer, int timeout_ms);
void SetNoDelay(int fd);

enum class WaitResult { kReady, kTimeout, kWoken };
// Waits until `fd` is readable (or writable, with `for_write`), `wake_fd` is signalled, or
// timeout_ms passes (-1: no timeout). Errors and hang-ups count as ready so that the following
// recv/send reports them.
WaitResult WaitFd(int fd, int wake_fd, int timeout_ms, bool for_write = false);

// Sends every byte. Fails (Unavailable / DeadlineExceeded) if the peer is gone, no byte could be
// sent for timeout_ms, or `wake_fd` is signalled. `more` hints that more data follows at once.
absl::Status SendAll(int fd, const void* data, size_t bytes, int timeout_ms, int wake_fd,
                     bool more = false);
// Receives up to `max` bytes (at least one) once the socket is readable. Fails if the peer closed
// the connection, nothing arrived for timeout_ms, or `wake_fd` is signalled.
absl::StatusOr<size_t> RecvSome(int fd, void* data, size_t max, int timeout_ms, int wake_fd);
// Receives exactly `bytes` bytes.
absl::Status RecvAll(int fd, void* data, size_t bytes, int timeout_ms, int wake_fd);

}  // namespace dq::kvtransfer
