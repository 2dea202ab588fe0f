// The router's view of its prefill and decode workers: who they are (Handshake: checkpoint
// identity and KV layout), whether they serve (Health every interval), and how loaded they are.
// Requests pick the least-loaded live worker of a role; a failed call marks a worker down at
// once so the next request routes around it, and the health thread brings it back (after a new
// handshake, since a restarted worker may run different weights).
//
// KV layouts: the first decode worker to answer sets the reference layout; every other worker
// (decode or prefill) is handshaken against it and refused (NOT_SERVING, logged as an error)
// when it differs, because KV written in one layout is garbage in another. Checkpoints may
// differ between roles (that is the point of disaggregated quantization); both are logged and
// exported in /metrics.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/worker_tls.h"
#include "dqserve/v1/worker.grpc.pb.h"
#include "router/api_error.h"

namespace dq::router {

enum class WorkerRole { kPrefill, kDecode };
std::string_view WorkerRoleName(WorkerRole role);

// A copy of what the router knows about one worker.
struct WorkerStatus {
  WorkerRole role = WorkerRole::kDecode;
  std::string address;
  bool handshaken = false;  // identity known and KV layout checked (ok or not)
  bool layout_ok = false;
  bool serving = false;  // the last Health said SERVING and no call failed since
  std::string detail;    // why not live, for /health and logs
  dqserve::v1::WorkerIdentity identity;
  uint32_t running = 0;  // from the last Health
  uint32_t queued = 0;
  uint32_t free_kv_blocks = 0;  // from the last Health
  uint32_t total_kv_blocks = 0;
  uint32_t open_leases = 0;
  uint32_t free_state_slots = 0;  // a hybrid model's recurrent state slots, from the last Health
  uint32_t total_state_slots = 0;
  uint32_t prefix_cached_blocks = 0;  // prefix cache, from the last Health
  uint64_t prefix_queried_blocks = 0;
  uint64_t prefix_hit_blocks = 0;
  uint64_t prefix_evicted_blocks = 0;
  int router_in_flight = 0;      // requests this router has on it now
  int consecutive_failures = 0;  // health probes failed in a row

  bool live() const { return handshaken && layout_ok && serving; }
  int64_t load() const { return int64_t{running} + queued + router_in_flight; }
};

// The least-loaded live worker, scanning from `start` (mod size) so that ties rotate between
// workers; nullopt when none is live. A live `preferred` worker (the one holding the prompt's
// prefix) wins unless it carries more than kAffinitySlack requests beyond the least loaded.
inline constexpr int64_t kAffinitySlack = 4;
std::optional<size_t> PickLeastLoaded(std::span<const WorkerStatus> workers, size_t start,
                                      std::optional<size_t> preferred = std::nullopt);

// Empty when equal; otherwise "field: expected X, worker has Y" clauses.
std::string DescribeLayoutMismatch(const dqserve::v1::KvLayout& expected,
                                   const dqserve::v1::KvLayout& actual);

struct WorkerRegistryOptions {
  std::vector<std::string> prefill_addresses;
  std::vector<std::string> decode_addresses;
  std::chrono::milliseconds health_interval{1000};
  std::chrono::milliseconds rpc_timeout{1000};  // Handshake and Health deadline
  std::string caller = "dq-router";
  // The deployment's worker credential (common/worker_key.h), sent on every call to a worker;
  // empty: none.
  std::string worker_key;
  // TLS to the workers (common/worker_tls.h); disabled: plaintext gRPC.
  WorkerTlsClient tls;
  // Health probes failed in a row before in-flight requests on the worker are cancelled
  // (a dead process already breaks its streams; this catches a hung host or a partition).
  int failures_to_cancel_requests = 3;
};

class WorkerRegistry;

// A picked worker. While it lives the worker's router_in_flight counts it, so concurrent picks
// spread out. Move-only; the registry must outlive it.
class WorkerHandle {
 public:
  WorkerHandle(WorkerHandle&& other) noexcept;
  WorkerHandle& operator=(WorkerHandle&&) = delete;
  WorkerHandle(const WorkerHandle&) = delete;
  ~WorkerHandle();

  WorkerRole role() const { return role_; }
  const std::string& address() const { return address_; }
  // The worker's identity as of the pick (transports for Reserve, logs).
  const dqserve::v1::WorkerIdentity& identity() const { return identity_; }
  dqserve::v1::PrefillWorker::StubInterface* prefill() const { return prefill_; }
  dqserve::v1::DecodeWorker::StubInterface* decode() const { return decode_; }

 private:
  friend class WorkerRegistry;
  WorkerHandle() = default;

  WorkerRegistry* registry_ = nullptr;
  WorkerRole role_ = WorkerRole::kDecode;
  size_t index_ = 0;
  std::string address_;
  dqserve::v1::WorkerIdentity identity_;
  dqserve::v1::PrefillWorker::StubInterface* prefill_ = nullptr;
  dqserve::v1::DecodeWorker::StubInterface* decode_ = nullptr;
};

class WorkerRegistry {
 public:
  // Called (from the health thread) when a worker has failed enough probes that its in-flight
  // requests should be cancelled: role, address, reason.
  using DownCallback = std::function<void(WorkerRole, const std::string&, const std::string&)>;

  explicit WorkerRegistry(WorkerRegistryOptions options);
  ~WorkerRegistry();
  WorkerRegistry(const WorkerRegistry&) = delete;
  WorkerRegistry& operator=(const WorkerRegistry&) = delete;

  void SetDownCallback(DownCallback cb);
  // Starts the health thread (its first round runs at once). Stop joins it; the destructor too.
  void Start();
  void Stop();
  // One round of handshakes and health probes over every worker (the thread's body; tests and
  // startup may call it directly).
  void ProbeAll();

  // The least-loaded live worker of `role` (or the live worker at address `preferred`, within
  // PickLeastLoaded's slack), or 503 "no live <role> worker" naming every worker's state.
  ApiResult<WorkerHandle> Pick(WorkerRole role, std::string_view preferred = {});
  // Whether the decode worker at `address` is live and keeps a prefix cache (its identity).
  bool IsLivePrefixCache(std::string_view address) const;
  // A request's call to the worker failed as unreachable: route around it until the health
  // thread sees it again.
  void MarkDown(WorkerRole role, const std::string& address, const std::string& reason);
  // A request's call ended in a way that may or may not mean the worker died (a CANCELLED the
  // router did not ask for): probe it now, so a dead worker is routed around at once and a live
  // one stays in service. Blocks for at most one health probe.
  void Recheck(WorkerRole role, const std::string& address);

  // Results of Handshake / Health calls (public so tests can drive the state machine without a
  // network). `expected` is the layout the handshake was asked to check against.
  void ApplyHandshake(WorkerRole role, size_t index,
                      const absl::StatusOr<dqserve::v1::HandshakeResponse>& response,
                      const std::optional<dqserve::v1::KvLayout>& expected);
  void ApplyHealth(WorkerRole role, size_t index,
                   const absl::StatusOr<dqserve::v1::WorkerHealthResponse>& response);

  std::vector<WorkerStatus> Snapshot() const;
  // At least one live prefill and one live decode worker.
  bool Ready() const;
  // The reference KV layout (the first handshaken decode worker's), once known.
  std::optional<dqserve::v1::KvLayout> reference_layout() const;
  // The checkpoint scheme of the first handshaken worker of `role` ("" when none yet).
  std::string Scheme(WorkerRole role) const;

 private:
  friend class WorkerHandle;
  struct Worker;

  std::vector<std::unique_ptr<Worker>>& WorkersOf(WorkerRole role);
  void ProbeWorker(WorkerRole role, size_t index);
  void Handshake(WorkerRole role, size_t index, const std::optional<dqserve::v1::KvLayout>& ex);
  void ReleaseHandle(WorkerRole role, size_t index);
  void MarkDownLocked(Worker& w, const std::string& reason);
  void Loop();

  const WorkerRegistryOptions options_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Worker>> prefill_;
  std::vector<std::unique_ptr<Worker>> decode_;
  std::optional<dqserve::v1::KvLayout> reference_layout_;
  // The first decode worker's sequence manifest, sent with the layout on every handshake.
  dqserve::v1::SequenceManifest reference_manifest_;
  size_t rotation_ = 0;  // rotates tie-breaks between equally loaded workers
  DownCallback on_down_;

  std::mutex loop_mu_;
  std::condition_variable loop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dq::router
