// A local deployment for integration tests: dq-decode, dq-prefill and dq-router started from
// DQ_BIN_DIR as real processes on free loopback ports, plus small gRPC/HTTP client helpers.
#pragma once

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dqserve/v1/generate.grpc.pb.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace dq::integration {

namespace v1 = dqserve::v1;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

inline std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

inline std::string BinDir() { return EnvOr("DQ_BIN_DIR", DQ_BINARY_DIR "/bin"); }
inline std::string SourceDir() { return EnvOr("DQ_SOURCE_DIR", DQ_SOURCE_DIR); }
// The tiny random Qwen3 written by the fixture.make_tiny_qwen3 test, next to bin/.
inline std::string TinyModel() { return BinDir() + "/../tiny-qwen3"; }
inline std::string SmolModel() { return SourceDir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"; }

// A free loopback port below the kernel's ephemeral range, so that no port the kernel assigns
// by itself (a worker's KV-transfer listener, an outgoing connection) can collide with it.
inline int FreePort() {
  int low = 32768, high = 60999;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d %d", &low, &high) != 2) low = 32768;
    std::fclose(f);
  }
  std::mt19937 rng(std::random_device{}());
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = std::uniform_int_distribution<int>(std::max(1024, low - 12000), low - 1)(rng);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    if (ok) return port;
  }
  return -1;
}

inline bool PortOpen(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool open = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return open;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string Tail(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(s.size() - n);
}

// One child process, its output in a log file. Dies with the test binary (PR_SET_PDEATHSIG), so a
// crashed test leaves no orphans.
class Child {
 public:
  Child(std::string name, const std::string& binary, const std::vector<std::string>& args,
        const std::map<std::string, std::string>& env, const std::string& log_path)
      : name_(std::move(name)), log_path_(log_path) {
    // Everything the child needs is built before fork: only async-signal-safe calls after it.
    std::vector<std::string> argv_s = {binary};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<std::string> env_s;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      const std::string key = kv.substr(0, kv.find('='));
      if (key == "DQ_API_KEY" || env.count(key) > 0) continue;  // only what this child is given
      env_s.push_back(kv);
    }
    for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : env_s) envp.push_back(s.data());
    envp.push_back(nullptr);
    const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      if (log_fd >= 0) {
        dup2(log_fd, STDOUT_FILENO);
        dup2(log_fd, STDERR_FILENO);
      }
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    if (log_fd >= 0) close(log_fd);
  }
  ~Child() {
    if (running()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  const std::string& name() const { return name_; }
  std::string log() const { return ReadFile(log_path_); }

  // Reaps the child when it has exited; true while it runs.
  bool running() {
    if (pid_ <= 0 || exited_) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      status_ = status;
      return false;
    }
    return true;
  }

  void Signal(int sig) {
    if (running()) kill(pid_, sig);
  }

  // Waits up to `timeout` for the child to exit; its wait status, or nullopt if it still runs
  // (then it is killed).
  std::optional<int> Wait(milliseconds timeout) {
    const auto end = Clock::now() + timeout;
    while (running() && Clock::now() < end) std::this_thread::sleep_for(milliseconds(20));
    if (running()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      exited_ = true;
      return std::nullopt;
    }
    return status_;
  }

 private:
  std::string name_;
  std::string log_path_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
};

inline std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

struct DeploymentOptions {
  std::string model;
  std::string api_key;  // set: the router gets it through env DQ_API_KEY
  std::vector<std::string> router_args;
  std::string worker_key;                         // set: all three get it through env DQ_WORKER_KEY
  std::map<std::string, std::string> worker_env;  // more environment for both workers
  std::map<std::string, std::string> router_env;  // and for the router
};

// dq-decode + dq-prefill + dq-router (HTTP and gRPC) as real processes.
class Deployment {
 public:
  explicit Deployment(DeploymentOptions options) : options_(std::move(options)) {}

  // Starts everything and waits until Health says SERVING; "" or what went wrong (with logs).
  std::string Start() {
    char dir_template[] = "/tmp/dq-integration-XXXXXX";
    if (mkdtemp(dir_template) == nullptr) return "cannot create a log directory";
    log_dir_ = dir_template;
    const std::string bin = BinDir();
    // Four distinct free ports; all three processes start at once (the router probes the workers
    // until they answer), so that their model loads overlap.
    std::vector<int> ports;
    while (ports.size() < 4) {
      const int p = FreePort();
      if (p <= 0) return "no free port";
      if (std::find(ports.begin(), ports.end(), p) == ports.end()) ports.push_back(p);
    }
    decode_port_ = ports[0];
    prefill_port_ = ports[1];
    http_port_ = ports[2];
    grpc_port_ = ports[3];
    const std::vector<std::string> common = {"--model", options_.model, "--threads", "1"};
    auto with = [&](std::vector<std::string> args) {
      args.insert(args.begin(), common.begin(), common.end());
      return args;
    };
    std::map<std::string, std::string> worker_env = options_.worker_env;
    if (!options_.worker_key.empty()) worker_env["DQ_WORKER_KEY"] = options_.worker_key;
    Spawn("decode", bin + "/dq-decode", with({"--port", std::to_string(decode_port_)}), worker_env);
    Spawn("prefill", bin + "/dq-prefill", with({"--port", std::to_string(prefill_port_)}),
          worker_env);
    std::vector<std::string> router_args = {"--model",
                                            options_.model,
                                            "--port",
                                            std::to_string(http_port_),
                                            "--grpc-port",
                                            std::to_string(grpc_port_),
                                            "--prefill",
                                            "127.0.0.1:" + std::to_string(prefill_port_),
                                            "--decode",
                                            "127.0.0.1:" + std::to_string(decode_port_),
                                            "--health-interval-ms",
                                            "100"};
    router_args.insert(router_args.end(), options_.router_args.begin(), options_.router_args.end());
    std::map<std::string, std::string> env = options_.router_env;
    if (!options_.worker_key.empty()) env["DQ_WORKER_KEY"] = options_.worker_key;
    if (!options_.api_key.empty()) env["DQ_API_KEY"] = options_.api_key;
    Spawn("router", bin + "/dq-router", router_args, env);
    if (auto e = WaitPort("decode", decode_port_); !e.empty()) return e;
    if (auto e = WaitPort("prefill", prefill_port_); !e.empty()) return e;
    if (auto e = WaitPort("router", grpc_port_); !e.empty()) return e;
    if (auto e = WaitPort("router", http_port_); !e.empty()) return e;
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port_),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::DqServe::NewStub(channel_);
    const auto end = Clock::now() + seconds(60);
    std::string last;
    while (Clock::now() < end) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + seconds(2));
      v1::HealthResponse health;
      const grpc::Status s = stub_->Health(&ctx, v1::HealthRequest(), &health);
      if (s.ok() && health.status() == v1::SERVING_STATUS_SERVING) return "";
      last = s.ok() ? health.ShortDebugString() : s.error_message();
      if (!AllRunning()) break;
      std::this_thread::sleep_for(milliseconds(50));
    }
    return "the router never reported SERVING (last: " + last + ")\n" + Logs();
  }

  // SIGTERM to every process; "" when each exited 0 within the limit, else what went wrong.
  std::string Stop() {
    stub_.reset();
    channel_.reset();
    std::string problems;
    // The router first (it aborts running requests), then the workers.
    for (auto it = children_.rbegin(); it != children_.rend(); ++it) {
      Child& c = **it;
      if (!c.running()) {
        problems += c.name() + " was no longer running before SIGTERM; ";
        continue;
      }
      c.Signal(SIGTERM);
      const std::optional<int> status = c.Wait(seconds(8));
      if (!status) {
        problems += c.name() + " did not exit within 8 s of SIGTERM; ";
      } else if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
        problems += c.name() + " ended with " + DescribeWaitStatus(*status) + " after SIGTERM; ";
      }
    }
    if (!problems.empty()) problems += "\n" + Logs();
    children_.clear();
    // Logs stay for a failed run (the path is printed), else they go.
    if (problems.empty() && ::testing::UnitTest::GetInstance()->failed_test_count() == 0) {
      std::error_code ignored;
      std::filesystem::remove_all(log_dir_, ignored);
    } else {
      std::fprintf(stderr, "process logs kept in %s\n", log_dir_.c_str());
    }
    return problems;
  }

  bool AllRunning() {
    for (auto& c : children_) {
      if (!c->running()) return false;
    }
    return true;
  }

  std::string Logs() const {
    std::string out;
    for (const auto& c : children_) {
      out += "--- " + c->name() + " log ---\n" + Tail(c->log(), 3000) + "\n";
    }
    return out;
  }

  v1::DqServe::Stub& stub() { return *stub_; }
  int http_port() const { return http_port_; }
  int grpc_port() const { return grpc_port_; }
  int prefill_port() const { return prefill_port_; }
  int decode_port() const { return decode_port_; }
  const std::string& api_key() const { return options_.api_key; }

 private:
  void Spawn(const std::string& name, const std::string& binary,
             const std::vector<std::string>& args, const std::map<std::string, std::string>& env) {
    children_.push_back(
        std::make_unique<Child>(name, binary, args, env, log_dir_ + "/" + name + ".log"));
  }

  std::string WaitPort(const std::string& name, int port) {
    Child* child = nullptr;
    for (auto& c : children_) {
      if (c->name() == name) child = c.get();
    }
    const auto end = Clock::now() + seconds(60);
    while (Clock::now() < end) {
      if (PortOpen(port)) return "";
      if (child != nullptr && !child->running()) {
        return name + " exited before listening on port " + std::to_string(port) + "\n" + Logs();
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    return name + " did not listen on port " + std::to_string(port) + " within 60 s\n" + Logs();
  }

  DeploymentOptions options_;
  std::string log_dir_;
  std::vector<std::unique_ptr<Child>> children_;  // in start order
  int decode_port_ = 0, prefill_port_ = 0, http_port_ = 0, grpc_port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::DqServe::Stub> stub_;
};

// Everything one Generate call streamed.
struct Stream {
  grpc::Status status;
  std::vector<v1::GenerateResponse> responses;
  std::string text;                // text deltas, concatenated
  std::vector<int32_t> token_ids;  // token ids, concatenated

  int finished_count() const {
    int n = 0;
    for (const auto& r : responses) n += r.finished() ? 1 : 0;
    return n;
  }
  const v1::GenerateResponse& last() const { return responses.back(); }
};

inline void AddAuth(grpc::ClientContext& ctx, const std::string& key) {
  if (!key.empty()) ctx.AddMetadata("authorization", "Bearer " + key);
}

inline Stream Generate(v1::DqServe::Stub& stub, const v1::GenerateRequest& request,
                       const std::string& key = "") {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(60));
  AddAuth(ctx, key);
  Stream out;
  auto reader = stub.Generate(&ctx, request);
  v1::GenerateResponse r;
  while (reader->Read(&r)) {
    out.text += r.text_delta();
    out.token_ids.insert(out.token_ids.end(), r.token_ids().begin(), r.token_ids().end());
    out.responses.push_back(r);
  }
  out.status = reader->Finish();
  return out;
}

// Checks the stream contract: status OK, at least one response, exactly one finished response
// and it is the last, with a finish reason and usage.
inline ::testing::AssertionResult WellFormed(const Stream& s) {
  if (!s.status.ok()) {
    return ::testing::AssertionFailure()
           << "status " << s.status.error_code() << ": " << s.status.error_message();
  }
  if (s.responses.empty()) return ::testing::AssertionFailure() << "no responses";
  if (s.finished_count() != 1) {
    return ::testing::AssertionFailure() << s.finished_count() << " finished responses";
  }
  const v1::GenerateResponse& f = s.last();
  if (!f.finished()) return ::testing::AssertionFailure() << "the last response is not finished";
  if (f.finish_reason() == v1::FINISH_REASON_UNSPECIFIED) {
    return ::testing::AssertionFailure() << "the final response has no finish_reason";
  }
  if (!f.has_usage() || f.usage().prompt_tokens() == 0) {
    return ::testing::AssertionFailure()
           << "the final response has no usage: " << f.ShortDebugString();
  }
  for (size_t i = 0; i + 1 < s.responses.size(); ++i) {
    if (s.responses[i].finish_reason() != v1::FINISH_REASON_UNSPECIFIED ||
        s.responses[i].has_usage()) {
      return ::testing::AssertionFailure()
             << "response " << i
             << " before the last carries finish data: " << s.responses[i].ShortDebugString();
    }
  }
  return ::testing::AssertionSuccess();
}

// A non-streaming HTTP request to the router: (status, parsed body).
inline std::pair<int, json> HttpJson(int port, const std::string& method, const std::string& path,
                                     const json& body = nullptr, const std::string& key = "") {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(60, 0);
  httplib::Headers headers;
  if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
  httplib::Result r = method == "GET" ? client.Get(path, headers)
                                      : client.Post(path, headers, body.dump(), "application/json");
  if (!r) return {0, json()};
  return {r->status, json::parse(r->body, nullptr, /*allow_exceptions=*/false)};
}

// dq_requests_total{outcome="..."} (or any other metric line's value), -1 when absent.
inline double Metric(int port, const std::string& series) {
  httplib::Client client("127.0.0.1", port);
  httplib::Result r = client.Get("/metrics");
  if (!r || r->status != 200) return -1;
  std::istringstream in(r->body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

inline v1::GenerateRequest PromptRequest(const std::string& prompt, uint32_t max_tokens) {
  v1::GenerateRequest r;
  r.set_prompt(prompt);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  return r;
}

inline v1::GenerateRequest ChatRequest(const std::string& user, uint32_t max_tokens) {
  v1::GenerateRequest r;
  v1::ChatMessage* m = r.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content(user);
  r.mutable_chat()->set_add_generation_prompt(true);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  return r;
}

// The byte length of the UTF-8 character starting at s[i] (1 for a stray byte).
inline size_t Utf8Len(const std::string& s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  return std::min(n, s.size() - i);
}

inline bool IsUtf8Start(const std::string& s, size_t i) {
  return (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
}

constexpr char kPrompt[] = "The quick brown fox jumps over the lazy dog. Once upon a time";

// A test suite whose tests share one deployment, `Derived::Options()`: started once before them,
// stopped at the end (a deployment that does not shut down cleanly fails the suite).
template <typename Derived>
class DeploymentSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    deployment_ = new Deployment(Derived::Options());
    start_error_ = deployment_->Start();
  }
  static void TearDownTestSuite() {
    if (deployment_ == nullptr) return;
    EXPECT_EQ(deployment_->Stop(), "") << "the deployment did not shut down cleanly";
    delete deployment_;
    deployment_ = nullptr;
  }
  void SetUp() override { ASSERT_EQ(start_error_, "") << "the deployment did not start"; }

  v1::DqServe::Stub& stub() { return deployment_->stub(); }
  int http_port() { return deployment_->http_port(); }

  inline static Deployment* deployment_ = nullptr;
  inline static std::string start_error_;
};

}  // namespace dq::integration
