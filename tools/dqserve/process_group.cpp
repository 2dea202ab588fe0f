#include "tools/dqserve/process_group.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"

namespace dq::cli {
namespace {

// Copies `fd` to stderr, prefixing each line with "[name] ".
void PumpLines(int fd, std::string name) {
  FILE* in = fdopen(fd, "r");
  if (in == nullptr) return void(close(fd));
  char* line = nullptr;
  size_t cap = 0;
  while (getline(&line, &cap, in) > 0) {
    std::fprintf(stderr, "[%s] %s", name.c_str(), line);
  }
  free(line);
  fclose(in);
}

[[noreturn]] void ExecChild(const ChildSpec& spec, int out_fd, pid_t parent) {
  // Die with the parent, even if it is SIGKILLed; close the race where it died before prctl.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(1);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  dup2(out_fd, STDOUT_FILENO);
  dup2(out_fd, STDERR_FILENO);
  close(out_fd);
  for (const std::string& e : spec.env) putenv(const_cast<char*>(e.c_str()));
  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

std::string DescribeStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("killed by signal ", WTERMSIG(status));
  return "stopped";
}

absl::StatusOr<int> ConnectTo(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("not an IPv4 address: ", host));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(std::strerror(errno));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(std::strerror(err));
  }
  return fd;
}

}  // namespace

ProcessGroup::~ProcessGroup() {
  StopAll(std::chrono::milliseconds(5000));
  for (Child& c : children_) {
    if (c.pump.joinable()) c.pump.join();
  }
}

absl::Status ProcessGroup::Start(const ChildSpec& spec) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError(std::strerror(errno));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) ExecChild(spec, fds[1], parent);
  close(fds[1]);
  Child c;
  c.name = spec.name;
  c.pid = pid;
  c.running = true;
  c.pump = std::thread(PumpLines, fds[0], spec.name);
  children_.push_back(std::move(c));
  return absl::OkStatus();
}

std::vector<ChildExit> ProcessGroup::Reap() {
  std::vector<ChildExit> out;
  for (Child& c : children_) {
    if (!c.running) continue;
    int status = 0;
    if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
      c.running = false;
      out.push_back({c.name, DescribeStatus(status)});
    }
  }
  return out;
}

bool ProcessGroup::Running(const std::string& name) const {
  // The latest child of that name: a restarted one replaces the one that died.
  for (auto it = children_.rbegin(); it != children_.rend(); ++it) {
    if (it->name == name) return it->running;
  }
  return false;
}

std::vector<std::string> ProcessGroup::StopAll(std::chrono::milliseconds grace) {
  for (auto it = children_.rbegin(); it != children_.rend(); ++it) {
    if (it->running) kill(it->pid, SIGTERM);
  }
  const auto deadline = std::chrono::steady_clock::now() + grace;
  auto any_running = [&] {
    Reap();
    for (const Child& c : children_) {
      if (c.running) return true;
    }
    return false;
  };
  while (any_running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<std::string> killed;
  for (Child& c : children_) {
    if (!c.running) continue;
    kill(c.pid, SIGKILL);
    waitpid(c.pid, nullptr, 0);
    c.running = false;
    killed.push_back(c.name);
  }
  return killed;
}

absl::Status WaitForPort(const std::string& host, int port, std::chrono::milliseconds timeout,
                         const std::function<bool()>& alive) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!alive()) return absl::AbortedError("the process exited before it listened");
    absl::StatusOr<int> fd = ConnectTo(host, port);
    if (fd.ok()) {
      close(*fd);
      return absl::OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("nothing listened on ", host, ":", port, " after ", timeout.count(), " ms"));
}

absl::StatusOr<int> PickFreePort(const std::string& host) {
  // Below the kernel's ephemeral range, so that no port the kernel assigns by itself (a worker's
  // KV-transfer listener on port 0, an outgoing connection) can be the one chosen here between
  // now and the child binding it.
  int low = 32768, high = 60999;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d %d", &low, &high) != 2) low = 32768;
    std::fclose(f);
  }
  std::mt19937 rng(std::random_device{}());
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port =
        low > 3072 ? std::uniform_int_distribution<int>(std::max(1024, low - 12000), low - 1)(rng)
                   : 0;
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError(std::strerror(errno));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
    socklen_t len = sizeof(addr);
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
    close(fd);
    if (ok) return ntohs(addr.sin_port);
  }
  return absl::UnavailableError(absl::StrCat("no free port on ", host, " below ", low));
}

absl::StatusOr<int> HttpGetStatus(const std::string& host, int port, const std::string& path,
                                  std::chrono::milliseconds timeout) {
  DQ_ASSIGN_OR_RETURN(int fd, ConnectTo(host, port));
  timeval tv{static_cast<time_t>(timeout.count() / 1000),
             static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const std::string req =
      absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", host, "\r\nConnection: close\r\n\r\n");
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return absl::UnavailableError("send failed");
  }
  char buf[64] = {};
  const ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
  close(fd);
  int code = 0;
  if (n <= 0 || std::sscanf(buf, "HTTP/1.%*d %d", &code) != 1) {
    return absl::UnavailableError("no HTTP answer");
  }
  return code;
}

}  // namespace dq::cli
