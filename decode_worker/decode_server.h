// A running decode worker: the KV transport, lease table, transfer regions, batching engine,
// the gRPC service on host:port, and the reaper that reclaims leases nobody committed in time.
// dq-decode's main and the in-process tests both start one of these.
#pragma once

#include <grpcpp/server.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "decode_worker/decode_batcher.h"
#include "decode_worker/decode_service.h"
#include "decode_worker/kv_lease_table.h"
#include "decode_worker/lease_part_regions.h"
#include "kvtransfer/transport.h"
#include "proto/grpc_standard_services.h"
#include "worker_common/drafter_weights.h"
#include "worker_common/phase_model.h"

namespace dq::decode {

struct DecodeServerOptions {
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  std::string worker_key;          // the deployment's worker credential (empty: any caller)
  int port = 0;                    // 0: any free port (tests)
  std::string transport = "tcp";   // the one kvtransfer backend this worker runs: tcp, ucx, nccl
  std::string transfer_host = "127.0.0.1";
  int max_batch = 4;
  int lease_ttl_ms = 120000;
  int reap_interval_ms = 100;  // how often expired leases are reclaimed
  // Speculative decoding: "none", "ngram" (a weightless drafter), "self" (the model on
  // cheaper weights, `drafter`) or "dflash" (a DFlash checkpoint, drafter.weights; CPU only);
  // a drafter's prompt KV comes from the prefill worker when that one runs the same drafter,
  // else it is computed here (docs/speculative.md). And its most tokens per step (adaptive
  // below that).
  std::string speculative = "none";
  int spec_k = 4;
  worker::DrafterWeightsOptions drafter;
  int threads = 0;  // the drafter's compute threads (0: all), as the worker's --threads
  // Prefix caching here (--prefix-cache): a finished request's full KV blocks stay cached, and
  // a later prompt that starts with them leases them instead of receiving them again. With
  // `assistant_kv` "reuse" the answer's blocks (the KV decode wrote) are kept too, so a next
  // turn reuses them; "reprefill" keeps the prompt's only. Not with a drafter (its prompt KV is
  // not cached).
  bool prefix_cache = false;
  std::string assistant_kv = "reprefill";
  // Tests: lease regions are the "device" cache's blocks although the transport moves host
  // memory (LeasePartRegions' direct_for_tests).
  bool direct_for_tests = false;
};

class DecodeServer {
 public:
  // Starts everything; `model` must outlive the server. Errors: a transport that cannot start,
  // an address that cannot be bound.
  static absl::StatusOr<std::unique_ptr<DecodeServer>> Start(worker::PhaseModel& model,
                                                             const DecodeServerOptions& options);
  ~DecodeServer();
  DecodeServer(const DecodeServer&) = delete;
  DecodeServer& operator=(const DecodeServer&) = delete;

  // host:port actually bound.
  const std::string& address() const { return address_; }
  const dqserve::v1::WorkerIdentity& identity() const { return identity_; }

  // Stops accepting calls, lets running streams finish for up to `grace`, then cancels them,
  // ends every request and releases every lease. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);

  KvLeaseTable& leases() { return *leases_; }
  // Every lease part's transfer regions (its manifest: the worker's identity's).
  LeasePartRegions& regions() { return *regions_; }
  DecodeBatcher& batcher() { return *batcher_; }

 private:
  explicit DecodeServer(worker::PhaseModel& model) : model_(model) {}
  absl::Status Init(const DecodeServerOptions& options);
  // The drafter that options.speculative names, into the batcher's options.
  // --prefix-cache / --assistant-kv: the lease table's cache and what finished requests keep.
  absl::Status SetUpPrefixCache(const DecodeServerOptions& o, DecodeBatcherOptions* bo);
  // A hybrid model: its state slot part; refuses what the state cannot do yet (prefix caching,
  // speculative decoding).
  absl::Status SetUpStateSlots(const DecodeServerOptions& o);
  absl::Status CreateServingDrafter(const DecodeServerOptions& o, DecodeBatcherOptions* bo);
  // The self drafter, its cache's staging and regions, and how its sequences begin.
  absl::Status CreateSelfDrafter(const DecodeServerOptions& o, DecodeBatcherOptions* bo);
  // The DFlash drafter (o.drafter.weights), likewise; its prompt context is shipped or
  // recomputed from the target's hidden states (target_prompt_features.h).
  absl::Status CreateDFlashDrafter(const DecodeServerOptions& o, DecodeBatcherOptions* bo);
  void ReapLoop(std::chrono::milliseconds interval);

  worker::PhaseModel& model_;
  std::unique_ptr<kvtransfer::Transport> transport_;
  std::unique_ptr<KvLeaseTable> leases_;
  std::unique_ptr<LeasePartRegions> regions_;
  std::unique_ptr<Model> drafter_weights_;  // the self drafter's (before drafter_: it maps them)
  std::unique_ptr<Checkpoint> dflash_checkpoint_;  // the DFlash drafter's, likewise
  std::unique_ptr<Drafter> drafter_;               // null: plain decoding
  std::unique_ptr<worker::KvStaging> drafter_staging_;
  std::unique_ptr<DecodeBatcher> batcher_;
  std::unique_ptr<DecodeService> service_;
  std::unique_ptr<grpc::Server> server_;
  // grpc.health.v1: SERVING until Shutdown (after server_: destroyed before it).
  std::unique_ptr<GrpcHealthPublisher> health_;
  std::string address_;
  dqserve::v1::WorkerIdentity identity_;

  std::mutex reap_mu_;
  std::condition_variable reap_cv_;
  bool stopping_ = false;
  std::thread reaper_;
};

}  // namespace dq::decode
