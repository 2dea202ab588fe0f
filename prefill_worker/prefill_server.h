// A running prefill worker: the loaded model, its KV stager and transports, the batching engine
// and the gRPC server, started and stopped in the right order. dq-prefill's main and the tests both
// use it.
#pragma once

#include <grpcpp/server.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "prefill_worker/drafter_prefill.h"
#include "prefill_worker/kv_senders.h"
#include "prefill_worker/kv_stager.h"
#include "prefill_worker/prefill_batcher.h"
#include "prefill_worker/prefill_service.h"
#include "proto/grpc_standard_services.h"
#include "worker_common/phase_model.h"

namespace dq::prefill {

struct PrefillServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: pick a free one (see PrefillServer::port)
  std::vector<std::string> transports = {"tcp"};
  int token_budget = 2048;
  std::string worker_key;  // the deployment's worker credential (empty: any caller)
  // Keep finished prompts' full KV blocks for later prompts with the same prefix
  // (PrefillBatcherOptions::prefix_cache).
  bool prefix_cache = false;
  int io_timeout_ms = 10000;
  // A device KV cache ships through a staging arena of a budget's blocks + 1 + this many
  // (kv_stager.h); an iteration writes at most that many blocks.
  int staging_extra_blocks = 31;
  // Tests: transports whose posts read the "device" cache directly (KvSendersOptions).
  std::set<std::string> direct_for_tests;
  // The drafter whose prompt KV this worker computes and ships too (drafter_prefill.h): "self"
  // or "dflash" (`drafter.weights` its directory); `drafter` not enabled: none. Its compute
  // threads are `drafter_threads`.
  std::string drafter_kind = "self";
  worker::DrafterWeightsOptions drafter;
  int drafter_threads = 0;
};

class PrefillServer {
 public:
  // Starts serving `model` (whose runner must not be used by anyone else). Errors: bad options,
  // a transport that cannot start, a port that cannot be bound.
  static absl::StatusOr<std::unique_ptr<PrefillServer>> Start(
      std::unique_ptr<worker::PhaseModel> model, const PrefillServerOptions& options);
  // Shutdown().
  ~PrefillServer();

  // Stops accepting calls, lets running calls finish for up to `grace_ms` (then cancels them),
  // stops the engine. Idempotent.
  void Shutdown(int grace_ms = 5000);
  // Blocks until Shutdown() was called (from another thread).
  void Wait();

  int port() const { return port_; }
  std::string address() const { return options_.host + ":" + std::to_string(port_); }
  dqserve::v1::WorkerIdentity identity() const { return service_->identity(); }
  const worker::PhaseModel& model() const { return *model_; }

 private:
  explicit PrefillServer(const PrefillServerOptions& options) : options_(options) {}

  PrefillServerOptions options_;
  int port_ = 0;
  bool shut_down_ = false;
  std::unique_ptr<worker::PhaseModel> model_;
  std::unique_ptr<KvStager> stager_;  // before senders_: they register its memory
  std::unique_ptr<KvSenders> senders_;
  std::unique_ptr<DrafterPrefill> drafter_;  // null: no drafter
  std::unique_ptr<PrefillBatcher> batcher_;
  std::unique_ptr<PrefillService> service_;
  std::unique_ptr<grpc::Server> server_;
  // grpc.health.v1: SERVING until Shutdown (after server_: destroyed before it).
  std::unique_ptr<GrpcHealthPublisher> health_;
};

}  // namespace dq::prefill
