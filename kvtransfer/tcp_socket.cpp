#include "kvtransfer/tcp_socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "common/status.h"

namespace dq::kvtransfer {
namespace {

std::string Errno(int err) { return std::string(std::strerror(err)); }

// Resolves host:port for TCP (numeric addresses and names alike).
absl::StatusOr<addrinfo*> Resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve '", host,
                                                   "': ", std::string(gai_strerror(rc)),
                                                   "; use an IP address or a resolvable name"));
  }
  return result;
}

absl::Status ConnectOne(int fd, const addrinfo* ai, int timeout_ms) {
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) return absl::OkStatus();
  if (errno != EINPROGRESS) return absl::UnavailableError(Errno(errno));
  pollfd p{fd, POLLOUT, 0};
  int rc = poll(&p, 1, timeout_ms);
  if (rc == 0) return absl::DeadlineExceededError(absl::StrCat("no answer in ", timeout_ms, " ms"));
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (rc < 0 || err != 0) return absl::UnavailableError(Errno(rc < 0 ? errno : err));
  return absl::OkStatus();
}

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.release();
  }
  return *this;
}

int Fd::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void Fd::reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

WakeEvent::WakeEvent() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void WakeEvent::Signal() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(fd_.get(), &one, sizeof(one));
}

absl::StatusOr<HostPort> ParseHostPort(std::string_view address) {
  size_t colon = address.rfind(':');
  HostPort hp;
  uint32_t port = 0;
  if (colon == std::string_view::npos ||
      !absl::SimpleAtoi(std::string(address.substr(colon + 1)), &port) || port == 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", std::string(address), "' is not host:port (e.g. 127.0.0.1:5555 or [::1]:5555)"));
  }
  std::string_view host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  hp.host = std::string(host);
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

std::string FormatHostPort(const HostPort& hp) {
  bool v6 = hp.host.find(':') != std::string::npos;
  return v6 ? absl::StrCat("[", hp.host, "]:", hp.port) : absl::StrCat(hp.host, ":", hp.port);
}

absl::StatusOr<Fd> Listen(const std::string& bind_address, uint16_t port, uint16_t* bound_port) {
  DQ_ASSIGN_OR_RETURN(addrinfo * ai, Resolve(bind_address, port, /*passive=*/true));
  Fd fd(socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  bool ok = fd.get() >= 0 && bind(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0 &&
            listen(fd.get(), 64) == 0;
  int err = errno;
  freeaddrinfo(ai);
  if (!ok) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", bind_address, ":", port, ": ",
                                               Errno(err),
                                               "; pick another port (0 = any free port)"));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  *bound_port = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                                 : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return fd;
}

absl::StatusOr<Fd> Accept(int listen_fd, std::string* peer) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  Fd fd(accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC));
  if (fd.get() < 0) return absl::UnavailableError(absl::StrCat("accept: ", Errno(errno)));
  char host[INET6_ADDRSTRLEN] = {};
  uint16_t port = 0;
  if (addr.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  }
  *peer = FormatHostPort({host, port});
  SetNoDelay(fd.get());
  return fd;
}

absl::StatusOr<Fd> Connect(const HostPort& peer, int timeout_ms) {
  DQ_ASSIGN_OR_RETURN(addrinfo * list, Resolve(peer.host, peer.port, /*passive=*/false));
  absl::Status last = absl::UnavailableError("no address");
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    Fd fd(socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (fd.get() < 0) continue;
    last = ConnectOne(fd.get(), ai, timeout_ms);
    if (!last.ok()) continue;
    // Back to blocking: every later call says MSG_DONTWAIT itself after polling.
    fcntl(fd.get(), F_SETFL, fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
    SetNoDelay(fd.get());
    freeaddrinfo(list);
    return fd;
  }
  freeaddrinfo(list);
  return absl::UnavailableError(absl::StrCat(
      "cannot connect to kvtransfer receiver at ", FormatHostPort(peer), ": ", last.message(),
      "; is the decode worker running and its kv address reachable from here?"));
}

void SetNoDelay(int fd) {
  // Acks and headers are tiny; waiting to coalesce them would add Nagle delay to every layer.
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

WaitResult WaitFd(int fd, int wake_fd, int timeout_ms, bool for_write) {
  pollfd p[2] = {{fd, static_cast<short>(for_write ? POLLOUT : POLLIN), 0}, {wake_fd, POLLIN, 0}};
  for (;;) {
    int rc = poll(p, wake_fd >= 0 ? 2 : 1, timeout_ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) return WaitResult::kTimeout;
    if (wake_fd >= 0 && (p[1].revents & POLLIN)) return WaitResult::kWoken;
    return WaitResult::kReady;
  }
}

absl::Status SendAll(int fd, const void* data, size_t bytes, int timeout_ms, int wake_fd,
                     bool more) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    WaitResult w = WaitFd(fd, wake_fd, timeout_ms, /*for_write=*/true);
    if (w == WaitResult::kWoken) return absl::CancelledError("transport is shutting down");
    if (w == WaitResult::kTimeout) {
      return absl::DeadlineExceededError(
          absl::StrCat("peer accepted no data for ", timeout_ms, " ms (stalled or unreachable)"));
    }
    ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT | (more ? MSG_MORE : 0));
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("send failed: ", Errno(errno)));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> RecvSome(int fd, void* data, size_t max, int timeout_ms, int wake_fd) {
  for (;;) {
    WaitResult w = WaitFd(fd, wake_fd, timeout_ms);
    if (w == WaitResult::kWoken) return absl::CancelledError("transport is shutting down");
    if (w == WaitResult::kTimeout) {
      return absl::DeadlineExceededError(
          absl::StrCat("peer sent nothing for ", timeout_ms, " ms in the middle of a message"));
    }
    ssize_t n = recv(fd, data, max, MSG_DONTWAIT);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) return absl::UnavailableError("peer closed the connection");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
    return absl::UnavailableError(absl::StrCat("recv failed: ", Errno(errno)));
  }
}

absl::Status RecvAll(int fd, void* data, size_t bytes, int timeout_ms, int wake_fd) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    DQ_ASSIGN_OR_RETURN(size_t n, RecvSome(fd, p, bytes, timeout_ms, wake_fd));
    p += n;
    bytes -= n;
  }
  return absl::OkStatus();
}

}  // namespace dq::kvtransfer
