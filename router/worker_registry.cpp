#include "router/worker_registry.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_interceptor.h>

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "router/rpc_errors.h"
#include "spdlog/spdlog.h"

namespace dq::router {
namespace {

namespace v1 = dqserve::v1;

// Adds "authorization: Bearer <worker key>" to every call on a channel, so that no call site
// can forget it.
class WorkerKeyInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit WorkerKeyInterceptor(const std::string& header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", header_});
    }
    methods->Proceed();
  }

 private:
  const std::string& header_;  // the factory's, which the channel keeps alive
};

class WorkerKeyInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit WorkerKeyInterceptorFactory(const std::string& key) : header_("Bearer " + key) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new WorkerKeyInterceptor(header_);
  }

 private:
  const std::string header_;
};

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const std::string& worker_key,
                                           const WorkerTlsClient& tls) {
  grpc::ChannelArguments args;
  // gRPC's default reconnect backoff grows to 2 minutes; a restarted worker should be seen
  // again on the next health round, not minutes later.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // gRPC (1.51) also takes the "min reconnect backoff" as each connection attempt's deadline,
  // TLS handshake included. At 100 ms a loaded 2-core host kept failing handshakes and a
  // restarted worker stayed unreachable for 17-31 s (serve_supervise under load); at 2 s, 8-9 s;
  // at 5 s, 5 s (one stalled attempt, then through). A refused connect still fails at once.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
  // Prompt logprobs of a long prompt with 20 alternatives each can pass gRPC's 4 MiB default.
  args.SetMaxReceiveMessageSize(256 << 20);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (tls.enabled()) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = tls.ca_pem;
    credentials = grpc::SslCredentials(o);
    // Workers are dialled by address (IPs, pod names); their certificate is for one name.
    args.SetSslTargetNameOverride(tls.name);
  }
  if (worker_key.empty()) return grpc::CreateCustomChannel(address, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> keyed;
  keyed.push_back(std::make_unique<WorkerKeyInterceptorFactory>(worker_key));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                 std::move(keyed));
}

std::string LayoutText(const v1::KvLayout& l) {
  return absl::StrCat(l.architecture(), " layers=", l.num_layers(), " kv_heads=", l.num_kv_heads(),
                      " head_dim=", l.head_dim(), " kv_dtype=", l.kv_dtype(),
                      " block_size=", l.block_size());
}

std::string IdentityText(const v1::WorkerIdentity& id) {
  const v1::CheckpointIdentity& c = id.checkpoint();
  return absl::StrCat("checkpoint path=", c.path(), " format=", c.format(), " scheme=", c.scheme(),
                      " sha256=", c.sha256().empty() ? std::string("-") : c.sha256(),
                      " size_bytes=", c.size_bytes(), "; kv layout ", LayoutText(id.kv_layout()),
                      "; transports=[", absl::StrJoin(id.transports(), ","),
                      "]; version=", id.version());
}

}  // namespace

std::string_view WorkerRoleName(WorkerRole role) {
  return role == WorkerRole::kPrefill ? "prefill" : "decode";
}

std::optional<size_t> PickLeastLoaded(std::span<const WorkerStatus> workers, size_t start,
                                      std::optional<size_t> preferred) {
  std::optional<size_t> best;
  for (size_t k = 0; k < workers.size(); ++k) {
    const size_t i = (start + k) % workers.size();
    if (!workers[i].live()) continue;
    if (!best || workers[i].load() < workers[*best].load()) best = i;
  }
  if (best && preferred && *preferred < workers.size() && workers[*preferred].live() &&
      workers[*preferred].load() <= workers[*best].load() + kAffinitySlack) {
    return preferred;
  }
  return best;
}

std::string DescribeLayoutMismatch(const v1::KvLayout& expected, const v1::KvLayout& actual) {
  std::vector<std::string> diffs;
  auto check = [&](std::string_view field, const auto& want, const auto& have) {
    if (want != have) {
      diffs.push_back(absl::StrCat(std::string(field), ": expected ", want, ", worker has ", have));
    }
  };
  check("architecture", expected.architecture(), actual.architecture());
  check("num_layers", expected.num_layers(), actual.num_layers());
  check("num_kv_heads", expected.num_kv_heads(), actual.num_kv_heads());
  check("head_dim", expected.head_dim(), actual.head_dim());
  check("kv_dtype", expected.kv_dtype(), actual.kv_dtype());
  check("block_size", expected.block_size(), actual.block_size());
  return absl::StrJoin(diffs, "; ");
}

// ---- WorkerHandle ----

WorkerHandle::WorkerHandle(WorkerHandle&& other) noexcept
    : registry_(std::exchange(other.registry_, nullptr)),
      role_(other.role_),
      index_(other.index_),
      address_(std::move(other.address_)),
      identity_(std::move(other.identity_)),
      prefill_(other.prefill_),
      decode_(other.decode_) {}

WorkerHandle::~WorkerHandle() {
  if (registry_ != nullptr) registry_->ReleaseHandle(role_, index_);
}

// ---- WorkerRegistry ----

struct WorkerRegistry::Worker {
  WorkerStatus status;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::PrefillWorker::Stub> prefill;
  std::unique_ptr<v1::DecodeWorker::Stub> decode;
};

WorkerRegistry::WorkerRegistry(WorkerRegistryOptions options) : options_(std::move(options)) {
  auto add = [this](std::vector<std::unique_ptr<Worker>>& out, WorkerRole role,
                    const std::vector<std::string>& addresses) {
    for (const std::string& address : addresses) {
      auto w = std::make_unique<Worker>();
      w->status.role = role;
      w->status.address = address;
      w->status.detail = "not contacted yet";
      w->channel = MakeChannel(address, options_.worker_key, options_.tls);
      if (role == WorkerRole::kPrefill) {
        w->prefill = v1::PrefillWorker::NewStub(w->channel);
      } else {
        w->decode = v1::DecodeWorker::NewStub(w->channel);
      }
      out.push_back(std::move(w));
    }
  };
  add(prefill_, WorkerRole::kPrefill, options_.prefill_addresses);
  add(decode_, WorkerRole::kDecode, options_.decode_addresses);
}

WorkerRegistry::~WorkerRegistry() { Stop(); }

void WorkerRegistry::SetDownCallback(DownCallback cb) {
  std::lock_guard lock(mu_);
  on_down_ = std::move(cb);
}

std::vector<std::unique_ptr<WorkerRegistry::Worker>>& WorkerRegistry::WorkersOf(WorkerRole role) {
  return role == WorkerRole::kPrefill ? prefill_ : decode_;
}

void WorkerRegistry::Start() {
  std::lock_guard lock(loop_mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void WorkerRegistry::Stop() {
  {
    std::lock_guard lock(loop_mu_);
    stopping_ = true;
  }
  loop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void WorkerRegistry::Loop() {
  std::unique_lock lock(loop_mu_);
  while (!stopping_) {
    lock.unlock();
    ProbeAll();
    lock.lock();
    loop_cv_.wait_for(lock, options_.health_interval, [this] { return stopping_; });
  }
}

void WorkerRegistry::ProbeAll() {
  // Decode workers first: their layout is what prefill workers are checked against.
  for (size_t i = 0; i < decode_.size(); ++i) ProbeWorker(WorkerRole::kDecode, i);
  for (size_t i = 0; i < prefill_.size(); ++i) ProbeWorker(WorkerRole::kPrefill, i);
}

void WorkerRegistry::ProbeWorker(WorkerRole role, size_t index) {
  Worker& w = *WorkersOf(role)[index];
  bool handshaken;
  std::optional<v1::KvLayout> expected;
  {
    std::lock_guard lock(mu_);
    handshaken = w.status.handshaken;
    expected = reference_layout_;
  }
  if (!handshaken) {
    if (role == WorkerRole::kPrefill && !expected) {
      std::lock_guard lock(mu_);
      w.status.detail = "waiting for a live decode worker's KV layout to check against";
      return;
    }
    Handshake(role, index, expected);
    std::lock_guard lock(mu_);
    if (!w.status.handshaken) return;  // the failure is recorded; probe again next round
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options_.rpc_timeout);
  v1::WorkerHealthResponse response;
  const grpc::Status s = role == WorkerRole::kPrefill
                             ? w.prefill->Health(&ctx, v1::WorkerHealthRequest(), &response)
                             : w.decode->Health(&ctx, v1::WorkerHealthRequest(), &response);
  ApplyHealth(role, index,
              s.ok() ? absl::StatusOr<v1::WorkerHealthResponse>(std::move(response))
                     : absl::StatusOr<v1::WorkerHealthResponse>(FromGrpcStatus(s)));
}

void WorkerRegistry::Handshake(WorkerRole role, size_t index,
                               const std::optional<v1::KvLayout>& expected) {
  Worker& w = *WorkersOf(role)[index];
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options_.rpc_timeout);
  v1::HandshakeRequest request;
  if (expected) {
    *request.mutable_expected_kv_layout() = *expected;
    std::lock_guard lock(mu_);  // the worker compares manifests (FAILURE_REASON_MANIFEST_MISMATCH)
    *request.mutable_expected_manifest() = reference_manifest_;
  }
  request.set_caller(options_.caller);
  v1::HandshakeResponse response;
  const grpc::Status s = role == WorkerRole::kPrefill
                             ? w.prefill->Handshake(&ctx, request, &response)
                             : w.decode->Handshake(&ctx, request, &response);
  ApplyHandshake(role, index,
                 s.ok() ? absl::StatusOr<v1::HandshakeResponse>(std::move(response))
                        : absl::StatusOr<v1::HandshakeResponse>(FromGrpcStatus(s)),
                 expected);
}

void WorkerRegistry::ApplyHandshake(WorkerRole role, size_t index,
                                    const absl::StatusOr<v1::HandshakeResponse>& response,
                                    const std::optional<v1::KvLayout>& expected) {
  DownCallback notify;
  std::string reason;
  {
    std::lock_guard lock(mu_);
    Worker& w = *WorkersOf(role).at(index);
    WorkerStatus& st = w.status;
    if (!response.ok()) {
      reason = absl::StrCat("handshake failed: ", response.status().ToString());
      const bool was_serving = st.serving;
      MarkDownLocked(w, reason);
      if (++st.consecutive_failures == options_.failures_to_cancel_requests) notify = on_down_;
      if (was_serving || st.consecutive_failures == 1) {
        spdlog::warn("{} worker {}: {}", WorkerRoleName(role), st.address, reason);
      }
    } else {
      st.consecutive_failures = 0;
      st.identity = response->worker();
      std::string mismatch;
      if (st.identity.role() != WorkerRoleName(role)) {
        mismatch = absl::StrCat("the worker says it is a '", st.identity.role(),
                                "' worker but the router was given it as --",
                                std::string(WorkerRoleName(role)), "; fix the router's flags");
      } else if (expected) {
        mismatch = DescribeLayoutMismatch(*expected, st.identity.kv_layout());
        // A manifest mismatch (the worker's own check) says itself what differs and what to do.
        const bool manifest = mismatch.empty() && !response->kv_layout_compatible() &&
                              response->reason() == v1::FAILURE_REASON_MANIFEST_MISMATCH;
        if (mismatch.empty() && !response->kv_layout_compatible()) mismatch = response->mismatch();
        if (!mismatch.empty() && !manifest) {
          mismatch = absl::StrCat("KV layout differs from the decode workers' (", mismatch,
                                  "); run both phases with the same architecture, KV dtype and "
                                  "block size");
        }
      }
      st.handshaken = true;
      st.layout_ok = mismatch.empty();
      st.detail = mismatch;
      if (!st.layout_ok) {
        st.serving = false;
        spdlog::error("{} worker {} refused: {}", WorkerRoleName(role), st.address, mismatch);
      } else {
        if (role == WorkerRole::kDecode && !reference_layout_) {
          reference_layout_ = st.identity.kv_layout();
          reference_manifest_ = st.identity.manifest();
        }
        spdlog::info("{} worker {}: {}", WorkerRoleName(role), st.address,
                     IdentityText(st.identity));
      }
    }
  }
  if (notify) notify(role, WorkersOf(role)[index]->status.address, reason);
}

void WorkerRegistry::ApplyHealth(WorkerRole role, size_t index,
                                 const absl::StatusOr<v1::WorkerHealthResponse>& response) {
  DownCallback notify;
  std::string reason;
  {
    std::lock_guard lock(mu_);
    Worker& w = *WorkersOf(role).at(index);
    WorkerStatus& st = w.status;
    if (!response.ok()) {
      reason = absl::StrCat("health check failed: ", response.status().ToString());
      if (st.serving)
        spdlog::warn("{} worker {} is down: {}", WorkerRoleName(role), st.address, reason);
      MarkDownLocked(w, reason);
      if (++st.consecutive_failures == options_.failures_to_cancel_requests) notify = on_down_;
    } else {
      st.consecutive_failures = 0;
      st.running = response->running_requests();
      st.queued = response->queued_requests();
      st.free_kv_blocks = response->free_kv_blocks();
      st.total_kv_blocks = response->total_kv_blocks();
      st.open_leases = response->open_leases();
      st.free_state_slots = response->free_state_slots();
      st.total_state_slots = response->total_state_slots();
      st.prefix_cached_blocks = response->prefix_cached_blocks();
      st.prefix_queried_blocks = response->prefix_queried_blocks();
      st.prefix_hit_blocks = response->prefix_hit_blocks();
      st.prefix_evicted_blocks = response->prefix_evicted_blocks();
      const v1::WorkerIdentity& id = response->identity();
      const bool identity_changed =
          response->has_identity() &&
          (id.kv_layout().SerializeAsString() != st.identity.kv_layout().SerializeAsString() ||
           id.manifest().hash() != st.identity.manifest().hash() ||
           id.checkpoint().SerializeAsString() != st.identity.checkpoint().SerializeAsString());
      if (identity_changed) {
        // A restart with other weights or layout between two probes: check it again.
        spdlog::warn("{} worker {} changed identity; handshaking again", WorkerRoleName(role),
                     st.address);
        MarkDownLocked(w, "identity changed since the handshake; checking again");
      } else if (st.layout_ok) {
        const bool serving = response->status() == v1::SERVING_STATUS_SERVING;
        if (serving != st.serving) {
          spdlog::info("{} worker {} is {}", WorkerRoleName(role), st.address,
                       serving ? "serving" : "not serving: " + response->detail());
        }
        st.serving = serving;
        st.detail =
            serving ? "" : (response->detail().empty() ? "not serving" : response->detail());
      }
    }
  }
  if (notify) notify(role, WorkersOf(role)[index]->status.address, reason);
}

void WorkerRegistry::MarkDownLocked(Worker& w, const std::string& reason) {
  w.status.serving = false;
  // Whatever comes back at this address may be a different process: handshake it again.
  w.status.handshaken = false;
  w.status.layout_ok = false;
  w.status.detail = reason;
  // Its last load report is stale now; keep /metrics and /health from showing phantom work.
  w.status.running = 0;
  w.status.queued = 0;
}

void WorkerRegistry::MarkDown(WorkerRole role, const std::string& address,
                              const std::string& reason) {
  std::lock_guard lock(mu_);
  for (auto& w : WorkersOf(role)) {
    if (w->status.address != address) continue;
    if (w->status.serving) {
      spdlog::warn("{} worker {} marked down: {}", WorkerRoleName(role), address, reason);
    }
    MarkDownLocked(*w, reason);
  }
}

void WorkerRegistry::Recheck(WorkerRole role, const std::string& address) {
  const auto& workers = WorkersOf(role);  // fixed at construction; only statuses change
  for (size_t i = 0; i < workers.size(); ++i) {
    if (workers[i]->status.address == address) ProbeWorker(role, i);
  }
}

bool WorkerRegistry::IsLivePrefixCache(std::string_view address) const {
  std::lock_guard lock(mu_);
  for (const auto& w : decode_) {
    if (w->status.address == address) {
      return w->status.live() && w->status.identity.prefix_cache();
    }
  }
  return false;
}

ApiResult<WorkerHandle> WorkerRegistry::Pick(WorkerRole role, std::string_view preferred) {
  std::lock_guard lock(mu_);
  auto& workers = WorkersOf(role);
  std::vector<WorkerStatus> statuses;
  std::optional<size_t> prefer;
  statuses.reserve(workers.size());
  for (const auto& w : workers) {
    if (!preferred.empty() && w->status.address == preferred) prefer = statuses.size();
    statuses.push_back(w->status);
  }
  const std::optional<size_t> picked = PickLeastLoaded(statuses, rotation_++, prefer);
  if (!picked) {
    std::vector<std::string> why;
    for (const WorkerStatus& s : statuses) why.push_back(absl::StrCat(s.address, ": ", s.detail));
    return ServiceUnavailable(absl::StrCat("No live ", std::string(WorkerRoleName(role)), " worker",
                                           why.empty()
                                               ? std::string(" is configured")
                                               : absl::StrCat(" (", absl::StrJoin(why, "; "), ")"),
                                           ". Retry shortly; if this persists, start or fix the ",
                                           std::string(WorkerRoleName(role)), " workers."));
  }
  Worker& w = *workers[*picked];
  ++w.status.router_in_flight;
  WorkerHandle h;
  h.registry_ = this;
  h.role_ = role;
  h.index_ = *picked;
  h.address_ = w.status.address;
  h.identity_ = w.status.identity;
  h.prefill_ = w.prefill.get();
  h.decode_ = w.decode.get();
  return h;
}

void WorkerRegistry::ReleaseHandle(WorkerRole role, size_t index) {
  std::lock_guard lock(mu_);
  --WorkersOf(role)[index]->status.router_in_flight;
}

std::vector<WorkerStatus> WorkerRegistry::Snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<WorkerStatus> out;
  for (const auto& w : prefill_) out.push_back(w->status);
  for (const auto& w : decode_) out.push_back(w->status);
  return out;
}

bool WorkerRegistry::Ready() const {
  std::lock_guard lock(mu_);
  auto any_live = [](const std::vector<std::unique_ptr<Worker>>& ws) {
    for (const auto& w : ws) {
      if (w->status.live()) return true;
    }
    return false;
  };
  return any_live(prefill_) && any_live(decode_);
}

std::optional<v1::KvLayout> WorkerRegistry::reference_layout() const {
  std::lock_guard lock(mu_);
  return reference_layout_;
}

std::string WorkerRegistry::Scheme(WorkerRole role) const {
  std::lock_guard lock(mu_);
  const auto& workers = role == WorkerRole::kPrefill ? prefill_ : decode_;
  for (const auto& w : workers) {
    if (w->status.handshaken) return w->status.identity.checkpoint().scheme();
  }
  return "";
}

}  // namespace dq::router
