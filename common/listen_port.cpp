#include "common/listen_port.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace dq {

absl::Status CheckPort(int port, std::string_view what, std::string_view zero_means) {
  if (port >= 1 && port <= 65535) return absl::OkStatus();
  if (port == 0 && !zero_means.empty()) return absl::OkStatus();
  // absl::StrCat takes absl::string_view, which is not std::string_view in Debian's Abseil.
  const std::string name(what), zero(zero_means);
  return absl::InvalidArgumentError(
      absl::StrCat(name, " is ", port, "; a port must be in [1, 65535]",
                   zero.empty() ? "" : absl::StrCat(" (or 0: ", zero, ")")));
}

absl::Status ProbeListen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc =
      getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot listen on ", host, ":", port, ": ", gai_strerror(rc),
                     "; give an IP address or a host name of this machine"));
  }
  int err = 0;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    // As the servers bind: SO_REUSEADDR (restart over TIME_WAIT) but never SO_REUSEPORT.
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    const bool bound = bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 1) == 0;
    err = bound ? 0 : errno;
    close(fd);
    if (bound) break;
  }
  freeaddrinfo(found);
  const std::string where = absl::StrCat(host, ":", port);
  switch (err) {
    case 0:
      return absl::OkStatus();
    case EADDRINUSE:
      return absl::AlreadyExistsError(
          absl::StrCat("port ", port, " on ", host, " is in use by another process; stop it ",
                       "(`ss -ltnp 'sport = :", port, "'` names it) or choose another port"));
    case EADDRNOTAVAIL:
      return absl::InvalidArgumentError(
          absl::StrCat("cannot listen on ", where, ": ", host, " is not an address of this host"));
    case EACCES:
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot listen on ", where, ": permission denied (ports below 1024 need privileges)"));
    default:
      return absl::UnavailableError(absl::StrCat("cannot listen on ", where, ": ", strerror(err)));
  }
}

}  // namespace dq
