// Test harness for transports between two real processes: fork() a receiver child that owns a
// transport and registered regions, and talk to it over pipes. The child learns what each region
// should hold from the plan made before the fork (it has its own copy of the parent's memory), so
// it can compare bytes itself.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kvtransfer/descriptor.h"
#include "kvtransfer/transport.h"

namespace dq::kvtransfer::testing {

// Length-prefixed messages over a pipe, every read bounded by a timeout so that a dead or
// stopped child fails the test instead of hanging it.
inline bool WriteMessage(int fd, const std::string& m) {
  ByteWriter w;
  w.Str(m);
  const std::string& b = w.data();
  for (size_t off = 0; off < b.size();) {
    ssize_t n = write(fd, b.data() + off, b.size() - off);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

inline bool ReadExact(int fd, char* out, size_t bytes, int timeout_ms) {
  for (size_t off = 0; off < bytes;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    ssize_t n = read(fd, out + off, bytes - off);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

inline std::optional<std::string> ReadMessage(int fd, int timeout_ms) {
  char len_bytes[4];
  if (!ReadExact(fd, len_bytes, 4, timeout_ms)) return std::nullopt;
  ByteReader r(std::string_view(len_bytes, 4));
  std::string m(r.U32(), '\0');
  if (!ReadExact(fd, m.data(), m.size(), timeout_ms)) return std::nullopt;
  return m;
}

// A child process exec'ing `args` (args[0]: the binary) with a command pipe each way, passed as
// "--in-fd N --out-fd M" (appended). The ends keep their own numbers in the child: dup2 onto a
// fixed number that already is that end is a no-op which leaves O_CLOEXEC set, so exec closed
// the pipe whenever pipe2 had handed out that very number.
struct CommandChild {
  pid_t pid = -1;
  int to = -1, from = -1;  // the parent's ends
};
inline std::optional<CommandChild> SpawnWithCommandPipe(std::vector<std::string> args) {
  int to[2], from[2];
  if (pipe2(to, O_CLOEXEC) != 0) return std::nullopt;
  if (pipe2(from, O_CLOEXEC) != 0) {
    close(to[0]);
    close(to[1]);
    return std::nullopt;
  }
  args.insert(args.end(), {"--in-fd", std::to_string(to[0]), "--out-fd", std::to_string(from[1])});
  CommandChild c;
  c.pid = fork();
  if (c.pid == 0) {
    fcntl(to[0], F_SETFD, 0);
    fcntl(from[1], F_SETFD, 0);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  c.to = to[1];
  c.from = from[0];
  return c;
}

// Fills `out` with what region `index` should hold once the sender's copies have landed.
using ExpectedFn = std::function<void(int index, std::vector<std::byte>& out)>;

// The forked receiver. Commands: "verify <i>" -> "ok" or what differs; "release <i>" -> status
// text; "register <bytes>" -> descriptor of a new (zeroed) region; "quit".
class ReceiverProcess {
 public:
  // Forks; returns once the child registered its regions (nullopt + reason if it could not).
  static std::unique_ptr<ReceiverProcess> Start(const TransportConfig& config,
                                                const std::vector<uint64_t>& sizes,
                                                ExpectedFn expected, std::string* error) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) {
      *error = "pipe() failed";
      return nullptr;
    }
    pid_t pid = fork();
    if (pid == 0) {
      close(to_child[1]);
      close(from_child[0]);
      ChildMain(config, sizes, expected, to_child[0], from_child[1]);  // never returns
    }
    close(to_child[0]);
    close(from_child[1]);
    auto p = std::unique_ptr<ReceiverProcess>(new ReceiverProcess(pid, to_child[1], from_child[0]));
    std::optional<std::string> hello = ReadMessage(p->from_child_, 30000);
    if (!hello || hello->rfind("error:", 0) == 0) {
      *error = hello ? *hello : "receiver child did not start";
      return nullptr;
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::optional<std::string> d = ReadMessage(p->from_child_, 30000);
      if (!d) {
        *error = "receiver child did not send its descriptors";
        return nullptr;
      }
      p->descriptors_.push_back(*d);
    }
    return p;
  }

  ~ReceiverProcess() {
    if (pid_ > 0) {
      Command("quit");
      if (!WaitExit(10000)) Kill();
    }
    close(to_child_);
    close(from_child_);
  }

  const std::vector<std::string>& descriptors() const { return descriptors_; }
  pid_t pid() const { return pid_; }

  // Sends a command and returns the reply ("" if the child did not answer in time).
  std::string Command(const std::string& command, int timeout_ms = 30000) {
    if (!WriteMessage(to_child_, command)) return "";
    return ReadMessage(from_child_, timeout_ms).value_or("");
  }

  void Stop() { kill(pid_, SIGSTOP); }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  ReceiverProcess(pid_t pid, int to_child, int from_child)
      : pid_(pid), to_child_(to_child), from_child_(from_child) {}

  bool WaitExit(int timeout_ms) {
    for (int waited = 0; waited < timeout_ms; waited += 10) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  [[noreturn]] static void ChildMain(const TransportConfig& config,
                                     const std::vector<uint64_t>& sizes, const ExpectedFn& expected,
                                     int in, int out) {
    auto transport = CreateTransport(config);
    if (!transport.ok()) {
      WriteMessage(out, "error: " + std::string(transport.status().message()));
      _exit(1);
    }
    WriteMessage(out, "ready");
    std::vector<std::vector<std::byte>> regions;
    std::vector<RegionId> ids;
    auto add = [&](uint64_t bytes) {
      regions.emplace_back(bytes, std::byte{0});  // moving a vector keeps its buffer
      auto handle = (*transport)->RegisterRegion(regions.back().data(), bytes);
      if (!handle.ok()) {
        WriteMessage(out, "error: " + std::string(handle.status().message()));
        _exit(1);
      }
      ids.push_back(handle->id);
      WriteMessage(out, handle->descriptor);
    };
    for (uint64_t bytes : sizes) add(bytes);
    for (;;) {
      std::optional<std::string> cmd = ReadMessage(in, -1);
      if (!cmd || *cmd == "quit") break;
      int arg = std::atoi(cmd->substr(cmd->find(' ') + 1).c_str());
      if (cmd->rfind("verify ", 0) == 0) {
        WriteMessage(out, Verify(regions.at(arg), arg, expected));
      } else if (cmd->rfind("release ", 0) == 0) {
        absl::Status s = (*transport)->ReleaseRegion(ids.at(arg));
        WriteMessage(out, s.ok() ? "ok" : std::string(s.message()));
      } else if (cmd->rfind("register ", 0) == 0) {
        add(static_cast<uint64_t>(arg));
      }
    }
    transport->reset();  // a clean shutdown is part of what is tested
    _exit(0);
  }

  static std::string Verify(const std::vector<std::byte>& got, int index,
                            const ExpectedFn& expected) {
    std::vector<std::byte> want(got.size());
    expected(index, want);
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != want[i]) {
        return "region " + std::to_string(index) + " differs first at byte " + std::to_string(i) +
               " of " + std::to_string(got.size());
      }
    }
    return "ok";
  }

  pid_t pid_;
  int to_child_;
  int from_child_;
  std::vector<std::string> descriptors_;
};

}  // namespace dq::kvtransfer::testing
