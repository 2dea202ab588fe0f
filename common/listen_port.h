// Listening ports, checked once for every server of a deployment (router HTTP and gRPC, both
// workers, dqserve up): the range, and why a bind failed in words a user can act on. Servers
// bind exclusively: no SO_REUSEPORT, so a second process on a port fails instead of sharing it.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace dq {

// InvalidArgument unless `port` is in [1, 65535] (or is 0 when `zero_means` says what 0 does,
// e.g. "any free port"). `what` names the setting in the message ("--port", "[router] port").
absl::Status CheckPort(int port, std::string_view what, std::string_view zero_means = "");

// Binds a TCP socket to host:port the way the servers do (exclusively) and closes it. OK when a
// server could listen there now; else AlreadyExists ("in use by another process"),
// InvalidArgument (not an address of this host, or not an address), PermissionDenied.
absl::Status ProbeListen(const std::string& host, int port);

}  // namespace dq
