// dq-bench-kv: KV transfer bandwidth GPU -> GPU for one prompt's KV cache (issue 7), the way the
// workers move it: the prefill side's paged cache on --sender-device, a decode lease (one
// contiguous block run) on --receiver-device in another process, one Post per layer and tensor.
//   nccl:       straight from device blocks into device blocks (kvtransfer nccl backend);
//   ucx:        the same with the ucx backend (needs UCX with CUDA loaded: cuda_ipc inside a node;
//               bench/pack_ucx_libs.sh);
//   tcp-staged: per layer a device -> pinned-host copy, then a tcp post into the receiver's pinned
//               staging buffer, and at the end the receiver lands it into its device blocks (what
//               the workers do for tcp, and for ucx without CUDA).
// A rep is timed from the first post until the bytes are in the receiver's device memory (nccl:
// every transfer acknowledged; ucx: every transfer's flush complete; tcp-staged: acknowledged and
// landed). Every phase prints a line with the elapsed time to stderr. The first rep is a warmup;
// GB/s is the mean over the others (1 GB = 1e9 bytes). The bytes are checked after the reps.
// Default shape: Qwen3-4B (36 layers, 8 KV heads, head dim 128, bf16), 8192 tokens, blocks of 16.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "kvtransfer/transport.h"
#ifdef DQ_BENCH_HAS_UCX
#include "kvtransfer/ucx_transport.h"
#endif
#include "common/logging.h"
#include "tests/unit/kvtransfer/two_process.h"

namespace dq::bench {
namespace {

using kvtransfer::CopyOp;
using kvtransfer::testing::ReadMessage;
using kvtransfer::testing::WriteMessage;
using Clock = std::chrono::steady_clock;

struct Options {
  int layers = 36, kv_heads = 8, head_dim = 128, block_size = 16, tokens = 8192, reps = 6;
  int sender_device = 0, receiver_device = 1, io_timeout_ms = 30000;
  std::string backends = "nccl,ucx,tcp-staged", out, role = "sender";
  int in_fd = -1, out_fd = -1;
};

// One side's paged cache: K and V pools of `pool_blocks` blocks per layer, the prompt (or the
// lease) a run of blocks starting at `first`. Different pool sizes and offsets on the two sides
// keep the offsets honest.
struct Side {
  const Options& o;
  int64_t pool_blocks, first;
  uint64_t block_bytes() const { return uint64_t(o.block_size) * o.kv_heads * o.head_dim * 2; }
  int64_t blocks() const { return (o.tokens + o.block_size - 1) / o.block_size; }
  uint64_t run_bytes() const { return blocks() * block_bytes(); }  // one layer, one tensor
  uint64_t pool_bytes() const { return uint64_t(o.layers) * pool_blocks * block_bytes(); }
  uint64_t run_offset(int layer) const {
    return (uint64_t(layer) * pool_blocks + first) * block_bytes();
  }
  uint64_t total_bytes() const { return 2 * uint64_t(o.layers) * run_bytes(); }
};
Side SenderSide(const Options& o) { return {o, (o.tokens / o.block_size) + 8, 5}; }
Side ReceiverSide(const Options& o) { return {o, (o.tokens / o.block_size) + 18, 11}; }

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// What one layer's run of one tensor holds: a pattern of (tensor, layer, word).
void Pattern(int tensor, int layer, std::vector<uint64_t>& out) {
  const uint64_t base = (uint64_t(tensor) << 56) ^ (uint64_t(layer) << 48);
  for (size_t i = 0; i < out.size(); ++i) out[i] = Mix(base + i);
}

const Clock::time_point kStart = Clock::now();

// One line per phase on stderr, with the seconds since this process started: a run that stalls
// shows where (the two processes print to the same terminal; the role tells them apart).
void Progress(const std::string& role, const std::string& what) {
  std::fprintf(stderr, "[dq-bench-kv %s %7.2f s] %s\n", role.c_str(),
               std::chrono::duration<double>(Clock::now() - kStart).count(), what.c_str());
  std::fflush(stderr);
}

#define BENCH_CUDA(expr)                                                            \
  do {                                                                              \
    cudaError_t e_ = (expr);                                                        \
    if (e_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "dq-bench-kv: %s: %s\n", #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "dq-bench-kv: %s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

struct Pools {
  char* t[2] = {nullptr, nullptr};
};

Pools AllocPools(const Side& s) {
  Pools p;
  for (char*& t : p.t) {
    BENCH_CUDA(cudaMalloc(&t, s.pool_bytes()));
    BENCH_CUDA(cudaMemset(t, 0, s.pool_bytes()));
  }
  return p;
}

void FillPattern(const Side& s, const Pools& p) {
  std::vector<uint64_t> words(s.run_bytes() / 8);
  for (int l = 0; l < s.o.layers; ++l) {
    for (int t = 0; t < 2; ++t) {
      Pattern(t, l, words);
      BENCH_CUDA(cudaMemcpy(p.t[t] + s.run_offset(l), words.data(), s.run_bytes(),
                            cudaMemcpyHostToDevice));
    }
  }
}

// Copies go through `stream` (non-blocking) into pinned `got` (run_bytes): a legacy-stream
// cudaMemcpy would also wait for every blocking stream in the process.
std::string VerifyPattern(const Side& s, const Pools& p, cudaStream_t stream, uint64_t* got) {
  std::vector<uint64_t> want(s.run_bytes() / 8);
  for (int l = 0; l < s.o.layers; ++l) {
    for (int t = 0; t < 2; ++t) {
      Pattern(t, l, want);
      BENCH_CUDA(cudaMemcpyAsync(got, p.t[t] + s.run_offset(l), s.run_bytes(),
                                 cudaMemcpyDeviceToHost, stream));
      BENCH_CUDA(cudaStreamSynchronize(stream));
      if (!std::equal(want.begin(), want.end(), got)) {
        return "layer " + std::to_string(l) + " tensor " + std::to_string(t) + " differs";
      }
    }
  }
  return "ok";
}

std::unique_ptr<kvtransfer::Transport> MakeTransport(const Options& o, const std::string& kind,
                                                     int device) {
  kvtransfer::TransportConfig c;
  c.kind = kind;
  c.cuda_device = device;
  c.io_timeout_ms = o.io_timeout_ms;
  auto t = kvtransfer::CreateTransport(c);
  Check(t.status(), "creating a transport");
  return std::move(*t);
}

std::vector<std::string> Backends(const Options& o) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= o.backends.size();) {
    size_t comma = std::min(o.backends.find(',', at), o.backends.size());
    if (comma > at) out.push_back(o.backends.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

std::string TransportKind(const std::string& backend) {
  return backend == "tcp-staged" ? "tcp" : backend;
}

// Whether the backend moves device blocks itself (no staging).
bool Direct(const std::string& backend) { return backend == "nccl" || backend == "ucx"; }

// Which UCX the ucx transport loaded (for the results), or why it cannot move device memory.
std::string UcxRuntime(kvtransfer::Transport& t) {
#ifdef DQ_BENCH_HAS_UCX
  if (t.name() == "ucx") return static_cast<kvtransfer::UcxTransport&>(t).runtime();
#endif
  return "";
}

// The tcp-staged receiver's pinned staging buffer: [tensor][layer][prompt block].
uint64_t StagingOffset(const Side& s, int tensor, int layer) {
  return (uint64_t(tensor) * s.o.layers + layer) * s.run_bytes();
}

// The decode side: registers the lease's (layer, tensor) regions with each backend (device
// blocks for nccl, a pinned staging buffer for tcp-staged), then answers land/verify/clear.
int RunReceiver(const Options& o) {
  Progress("receiver", "starting on cuda:" + std::to_string(o.receiver_device));
  BENCH_CUDA(cudaSetDevice(o.receiver_device));
  const Side s = ReceiverSide(o);
  const Pools pools = AllocPools(s);
  char* staging = nullptr;
  BENCH_CUDA(
      cudaHostAlloc(reinterpret_cast<void**>(&staging), s.total_bytes(), cudaHostAllocPortable));
  // Every CUDA resource the commands need exists before the transports do: once their threads
  // run (communicator set-up, progress), a CUDA call of this thread can wait behind them (a
  // stream created after "ready" never returned on the GPU machine).
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  uint64_t* verify_buf = nullptr;
  BENCH_CUDA(cudaMallocHost(reinterpret_cast<void**>(&verify_buf), s.run_bytes()));
  std::vector<std::unique_ptr<kvtransfer::Transport>> transports;
  for (const std::string& backend : Backends(o)) {
    Progress("receiver", "creating the " + backend + " transport");
    transports.push_back(MakeTransport(o, TransportKind(backend), o.receiver_device));
    if (Direct(backend) && !transports.back()->supports_device_memory()) {
      const std::string why = "the " + backend + " transport cannot move device memory here" +
                              (backend == "ucx" ? " (" + UcxRuntime(*transports.back()) +
                                                      "); load UCX with CUDA (bench/"
                                                      "pack_ucx_libs.sh) or drop ucx from "
                                                      "--backends"
                                                : "");
      WriteMessage(o.out_fd, "error: " + why);
      Progress("receiver", why);
      return 1;
    }
    for (int l = 0; l < o.layers; ++l) {
      for (int t = 0; t < 2; ++t) {
        char* at =
            Direct(backend) ? pools.t[t] + s.run_offset(l) : staging + StagingOffset(s, t, l);
        auto h = transports.back()->RegisterRegion(at, s.run_bytes());
        Check(h.status(), "registering a lease region");
        WriteMessage(o.out_fd, h->descriptor);
      }
    }
  }
  WriteMessage(o.out_fd, "ready");
  Progress("receiver", "regions registered, ready");
  for (;;) {
    std::optional<std::string> cmd = ReadMessage(o.in_fd, -1);
    if (!cmd || *cmd == "quit") break;
    if (*cmd == "land") {  // what LeaseRegions::Land does at commit
      for (int l = 0; l < o.layers; ++l) {
        for (int t = 0; t < 2; ++t) {
          BENCH_CUDA(cudaMemcpyAsync(pools.t[t] + s.run_offset(l), staging + StagingOffset(s, t, l),
                                     s.run_bytes(), cudaMemcpyHostToDevice, stream));
        }
      }
      BENCH_CUDA(cudaStreamSynchronize(stream));
      WriteMessage(o.out_fd, "ok");
    } else if (*cmd == "verify") {
      Progress("receiver", "verifying");
      const std::string verdict = VerifyPattern(s, pools, stream, verify_buf);
      Progress("receiver", "verified: " + verdict);
      WriteMessage(o.out_fd, verdict);
    } else if (*cmd == "clear") {
      for (char* t : pools.t) BENCH_CUDA(cudaMemsetAsync(t, 0, s.pool_bytes(), stream));
      BENCH_CUDA(cudaStreamSynchronize(stream));
      WriteMessage(o.out_fd, "ok");
    }
  }
  transports.clear();
  Progress("receiver", "done");
  return 0;
}

struct Receiver {
  pid_t pid = -1;
  int to = -1, from = -1;
  std::map<std::string, std::vector<std::string>> descriptors;  // by backend
  std::string Command(const std::string& c) {
    WriteMessage(to, c);
    // Bounded: a stuck receiver costs the check, not the figures already measured.
    return ReadMessage(from, 120000).value_or("(no answer within 120 s)");
  }
};

Receiver SpawnReceiver(const Options& o, const std::vector<std::string>& flags) {
  signal(SIGPIPE, SIG_IGN);  // a dead receiver shows as a failed read, not a silent exit
  std::vector<std::string> args = {"/proc/self/exe", "--role", "receiver"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::optional<kvtransfer::testing::CommandChild> child =
      kvtransfer::testing::SpawnWithCommandPipe(std::move(args));
  if (!child) std::exit(1);
  Receiver r;
  r.pid = child->pid;
  r.to = child->to;
  r.from = child->from;
  for (const std::string& backend : Backends(o)) {
    for (int i = 0; i < 2 * o.layers; ++i) {
      std::optional<std::string> d = ReadMessage(r.from, 120000);
      if (!d) {
        std::fprintf(stderr, "dq-bench-kv: the receiver did not start (see its stderr)\n");
        std::exit(1);
      }
      if (d->rfind("error: ", 0) == 0) {
        std::fprintf(stderr, "dq-bench-kv: receiver: %s\n", d->c_str() + 7);
        std::exit(1);
      }
      r.descriptors[backend].push_back(*d);
    }
  }
  if (ReadMessage(r.from, 120000).value_or("") != "ready") std::exit(1);
  return r;
}

nlohmann::json Summary(const std::vector<double>& reps, uint64_t bytes, double setup_ms,
                       const std::string& verified) {
  const std::vector<double> timed(reps.begin() + (reps.size() > 1 ? 1 : 0), reps.end());
  const double mean = std::accumulate(timed.begin(), timed.end(), 0.0) / timed.size();
  const double best = *std::min_element(timed.begin(), timed.end());
  return {{"reps_s", reps},
          {"warmup_s", reps.front()},
          {"mean_s", mean},
          {"gbps_mean", bytes / mean / 1e9},
          {"gbps_best", bytes / best / 1e9},
          {"setup_ms", setup_ms},
          {"verified", verified}};
}

// Registers the sender's source memory and prepares the lease's regions (the first Prepare
// connects: for nccl, the communicator comes up here).
struct SenderSetup {
  std::unique_ptr<kvtransfer::Transport> transport;
  kvtransfer::RegionId local[2] = {0, 0};
  std::vector<kvtransfer::RemoteRegionId> remotes;
  double setup_ms = 0;
};

SenderSetup Prepare(const Options& o, const std::string& backend, char* const sources[2],
                    uint64_t source_bytes, const std::vector<std::string>& descriptors) {
  SenderSetup s;
  Progress("sender", backend + ": creating the transport, registering the source");
  s.transport = MakeTransport(o, TransportKind(backend), o.sender_device);
  if (Direct(backend) && !s.transport->supports_device_memory()) {
    std::fprintf(stderr, "dq-bench-kv: the %s transport cannot move device memory here %s\n",
                 backend.c_str(), UcxRuntime(*s.transport).c_str());
    std::exit(1);
  }
  for (int t = 0; t < 2; ++t) {
    auto h = s.transport->RegisterRegion(sources[t], source_bytes);
    Check(h.status(), "registering the source");
    s.local[t] = h->id;
  }
  const auto start = Clock::now();
  for (const std::string& d : descriptors) {
    auto id = s.transport->Prepare(d);
    Check(id.status(), "preparing a lease region");
    s.remotes.push_back(*id);
  }
  s.setup_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  Progress("sender", backend + ": " + std::to_string(descriptors.size()) +
                         " lease regions prepared in " + std::to_string(s.setup_ms) + " ms");
  return s;
}

void WaitAll(kvtransfer::Transport& t, const std::vector<kvtransfer::TransferId>& ids) {
  for (kvtransfer::TransferId id : ids)
    Check(kvtransfer::WaitForTransfer(t, id, 120000), "transfer");
}

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void ReportRep(const std::string& backend, int rep, double seconds, uint64_t bytes) {
  Progress("sender", backend + ": rep " + std::to_string(rep) + " " +
                         std::to_string(1e3 * seconds) + " ms, " +
                         std::to_string(bytes / seconds / 1e9) + " GB/s");
}

// Device blocks straight into device blocks (nccl, ucx): one Post per layer and tensor.
nlohmann::json BenchDirect(const Options& o, const std::string& backend, const Side& s,
                           const Pools& pools, Receiver& r) {
  SenderSetup setup = Prepare(o, backend, pools.t, s.pool_bytes(), r.descriptors[backend]);
  std::vector<double> reps;
  for (int rep = 0; rep < o.reps; ++rep) {
    std::vector<kvtransfer::TransferId> ids;
    const auto t0 = Clock::now();
    for (int l = 0; l < o.layers; ++l) {
      for (int t = 0; t < 2; ++t) {
        const CopyOp op{s.run_offset(l), 0, s.run_bytes()};
        auto id = setup.transport->Post(setup.local[t], setup.remotes[2 * l + t], {&op, 1});
        Check(id.status(), "posting");
        ids.push_back(*id);
      }
    }
    WaitAll(*setup.transport, ids);
    reps.push_back(Since(t0));
    ReportRep(backend, rep, reps.back(), s.total_bytes());
  }
  Progress("sender", backend + ": verifying the receiver's bytes");
  const std::string verified = r.Command("verify");
  r.Command("clear");
  nlohmann::json summary = Summary(reps, s.total_bytes(), setup.setup_ms, verified);
  if (backend == "ucx") {
    summary["ucx_runtime"] = UcxRuntime(*setup.transport);
#ifdef DQ_BENCH_HAS_UCX
    summary["ucx_endpoint"] =
        static_cast<kvtransfer::UcxTransport&>(*setup.transport).DescribeEndpoints();
#endif
  }
  return summary;
}

// What the workers do for tcp: per layer a device -> pinned arena copy behind the "forward
// pass", the layer posted once its copy is done, the receiver lands its staging buffer at the end.
nlohmann::json BenchTcpStaged(const Options& o, const Side& s, const Pools& pools, Receiver& r) {
  char* arena = nullptr;  // [tensor][layer][prompt block]
  BENCH_CUDA(
      cudaHostAlloc(reinterpret_cast<void**>(&arena), s.total_bytes(), cudaHostAllocPortable));
  char* const halves[2] = {arena, arena + s.total_bytes() / 2};
  SenderSetup setup =
      Prepare(o, "tcp-staged", halves, s.total_bytes() / 2, r.descriptors["tcp-staged"]);
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<cudaEvent_t> copied(o.layers);
  for (cudaEvent_t& e : copied) {
    BENCH_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync));
  }
  std::vector<double> reps;
  for (int rep = 0; rep < o.reps; ++rep) {
    std::vector<kvtransfer::TransferId> ids;
    const auto t0 = Clock::now();
    for (int l = 0; l < o.layers; ++l) {
      for (int t = 0; t < 2; ++t) {
        BENCH_CUDA(cudaMemcpyAsync(halves[t] + uint64_t(l) * s.run_bytes(),
                                   pools.t[t] + s.run_offset(l), s.run_bytes(),
                                   cudaMemcpyDeviceToHost, stream));
      }
      BENCH_CUDA(cudaEventRecord(copied[l], stream));
    }
    for (int l = 0; l < o.layers; ++l) {
      BENCH_CUDA(cudaEventSynchronize(copied[l]));
      for (int t = 0; t < 2; ++t) {
        const CopyOp op{uint64_t(l) * s.run_bytes(), 0, s.run_bytes()};
        auto id = setup.transport->Post(setup.local[t], setup.remotes[2 * l + t], {&op, 1});
        Check(id.status(), "posting");
        ids.push_back(*id);
      }
    }
    WaitAll(*setup.transport, ids);
    if (r.Command("land") != "ok") std::exit(1);
    reps.push_back(Since(t0));
    ReportRep("tcp-staged", rep, reps.back(), s.total_bytes());
  }
  Progress("sender", "tcp-staged: verifying the receiver's bytes");
  const std::string verified = r.Command("verify");
  r.Command("clear");
  setup.transport.reset();
  for (cudaEvent_t e : copied) cudaEventDestroy(e);
  cudaStreamDestroy(stream);
  cudaFreeHost(arena);
  return Summary(reps, s.total_bytes(), setup.setup_ms, verified);
}

std::vector<std::string> ShapeFlags(const Options& o) {
  auto i = [](int v) { return std::to_string(v); };
  return {"--layers",          i(o.layers),          "--kv-heads",
          i(o.kv_heads),       "--head-dim",         i(o.head_dim),
          "--block-size",      i(o.block_size),      "--tokens",
          i(o.tokens),         "--sender-device",    i(o.sender_device),
          "--receiver-device", i(o.receiver_device), "--io-timeout-ms",
          i(o.io_timeout_ms),  "--backends",         o.backends};
}

int RunSender(const Options& o) {
  for (const std::string& backend : Backends(o)) {
    if (backend != "nccl" && backend != "ucx" && backend != "tcp-staged") {
      std::fprintf(stderr, "dq-bench-kv: unknown backend '%s' (nccl, ucx, tcp-staged)\n",
                   backend.c_str());
      return 2;
    }
  }
  Progress("sender", "starting the receiver process (backends " + o.backends + ")");
  Receiver r = SpawnReceiver(o, ShapeFlags(o));
  Progress("sender",
           "receiver ready; filling the source on cuda:" + std::to_string(o.sender_device));
  BENCH_CUDA(cudaSetDevice(o.sender_device));
  const Side s = SenderSide(o);
  const Pools pools = AllocPools(s);
  FillPattern(s, pools);
  nlohmann::json results;
  bool ok = true;
  for (const std::string& backend : Backends(o)) {
    results[backend] =
        Direct(backend) ? BenchDirect(o, backend, s, pools, r) : BenchTcpStaged(o, s, pools, r);
    ok &= results[backend]["verified"] == "ok";
    std::printf("%-11s %7.2f GB/s mean (best %.2f, warmup %.1f ms, setup %.1f ms), bytes %s\n",
                backend.c_str(), results[backend]["gbps_mean"].get<double>(),
                results[backend]["gbps_best"].get<double>(),
                1e3 * results[backend]["warmup_s"].get<double>(),
                results[backend]["setup_ms"].get<double>(),
                results[backend]["verified"].get<std::string>().c_str());
    std::fflush(stdout);
  }
  r.Command("quit");
  // Bounded: a receiver stuck tearing its transports down must not cost the results.
  for (int waited_ms = 0; waitpid(r.pid, nullptr, WNOHANG) == 0; waited_ms += 50) {
    if (waited_ms >= 20000) {
      Progress("sender", "the receiver did not exit 20 s after quit; killing it");
      kill(r.pid, SIGKILL);
      waitpid(r.pid, nullptr, 0);
      break;
    }
    usleep(50000);
  }
  Progress("sender", "done");
  // NCCL's and UCX's tunables (channels, protocols, UCX_TLS) change the figures: record them.
  nlohmann::json env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (kv.rfind("NCCL_", 0) == 0 || kv.rfind("UCX_", 0) == 0 ||
        kv.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) {
      env[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
    }
  }
  nlohmann::json j = {{"bench", "kv_transfer"},
                      {"shape",
                       {{"layers", o.layers},
                        {"kv_heads", o.kv_heads},
                        {"head_dim", o.head_dim},
                        {"dtype", "bf16"},
                        {"block_size", o.block_size},
                        {"tokens", o.tokens}}},
                      {"bytes", s.total_bytes()},
                      {"posts_per_rep", 2 * o.layers},
                      {"bytes_per_post", s.run_bytes()},
                      {"reps", o.reps},
                      {"timing",
                       "first post until the bytes are in the receiver's device memory; rep 0 is a "
                       "warmup; GB = 1e9 bytes"},
                      {"sender_device", o.sender_device},
                      {"receiver_device", o.receiver_device},
                      {"env", env},
                      {"results", results}};
  if (!o.out.empty()) std::ofstream(o.out) << j.dump(2) << "\n";
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace dq::bench

int main(int argc, char** argv) {
  dq::LogToStderr();
  dq::bench::Options o;
  CLI::App app{
      "dq-bench-kv: KV transfer bandwidth GPU -> GPU (nccl, ucx, tcp through pinned staging)"};
  app.add_option("--out", o.out, "write the results as JSON here");
  app.add_option("--backends", o.backends, "comma-separated: nccl, ucx, tcp-staged")
      ->capture_default_str();
  app.add_option("--layers", o.layers)->capture_default_str();
  app.add_option("--kv-heads", o.kv_heads)->capture_default_str();
  app.add_option("--head-dim", o.head_dim)->capture_default_str();
  app.add_option("--block-size", o.block_size, "tokens per KV block")->capture_default_str();
  app.add_option("--tokens", o.tokens, "prompt tokens")->capture_default_str();
  app.add_option("--reps", o.reps, "repetitions per backend (the first is a warmup)")
      ->check(CLI::Range(2, 1000))
      ->capture_default_str();
  app.add_option("--sender-device", o.sender_device)->capture_default_str();
  app.add_option("--receiver-device", o.receiver_device)->capture_default_str();
  app.add_option("--io-timeout-ms", o.io_timeout_ms)->capture_default_str();
  app.add_option("--role", o.role)->group("");  // internal: the receiver process
  app.add_option("--in-fd", o.in_fd)->group("");
  app.add_option("--out-fd", o.out_fd)->group("");
  CLI11_PARSE(app, argc, argv);
  return o.role == "receiver" ? dq::bench::RunReceiver(o) : dq::bench::RunSender(o);
}
