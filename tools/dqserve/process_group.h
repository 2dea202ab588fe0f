// The child processes of a local deployment (router, prefill and decode workers): started with
// their output prefixed by name, watched, and stopped together. A child also dies when this
// process dies, even by SIGKILL (PR_SET_PDEATHSIG), so `dqserve up` never leaves orphans.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace dq::cli {

struct ChildSpec {
  std::string name;               // "router", "prefill", "decode": prefixes its output lines
  std::vector<std::string> argv;  // argv[0] is the executable path
  // Extra environment entries "KEY=value" (secrets go here, never on the command line).
  std::vector<std::string> env;
};

// What ended a child, as Reap() reports it.
struct ChildExit {
  std::string name;
  std::string how;  // "exited with status 1", "killed by signal 9"
};

class ProcessGroup {
 public:
  ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  // Stops every child still running (SIGTERM, then SIGKILL after the grace period).
  ~ProcessGroup();

  // Forks and execs. The caller must block SIGINT/SIGTERM/SIGCHLD in all its threads first
  // (the child restores an empty mask before exec).
  absl::Status Start(const ChildSpec& spec);

  // Collects children that have exited since the last call (non-blocking).
  std::vector<ChildExit> Reap();
  // Whether the latest child started under `name` is still running (as of the last Reap).
  bool Running(const std::string& name) const;

  // SIGTERM to every running child, in reverse start order; waits up to `grace` for them all
  // to exit, then SIGKILLs the rest. Returns the children that had to be killed.
  std::vector<std::string> StopAll(std::chrono::milliseconds grace);

 private:
  struct Child {
    std::string name;
    pid_t pid = -1;
    bool running = false;
    std::thread pump;  // copies the child's output to stderr, line by line, with its name
  };
  std::vector<Child> children_;
};

// Tries to connect to host:port until it accepts, `deadline` passes (DeadlineExceeded), or
// `alive` returns false (Aborted: the process that should listen there died).
absl::Status WaitForPort(const std::string& host, int port, std::chrono::milliseconds timeout,
                         const std::function<bool()>& alive);

// A free TCP port on `host` right now (the kernel's pick; a tiny race with other processes is
// possible, and the child's bind error then says so).
absl::StatusOr<int> PickFreePort(const std::string& host);

// GET http://host:port<path> on a plain socket; the status code, or an error.
absl::StatusOr<int> HttpGetStatus(const std::string& host, int port, const std::string& path,
                                  std::chrono::milliseconds timeout);

}  // namespace dq::cli
