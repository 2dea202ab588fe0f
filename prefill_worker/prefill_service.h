// dqserve.v1.PrefillWorker over gRPC (sync API): validates a request and its lease, hands it to
// the batching engine and waits for it, watching for the caller's cancel and deadline.
#pragma once

#include <mutex>
#include <string>

#include "dqserve/v1/worker.grpc.pb.h"
#include "prefill_worker/drafter_prefill.h"
#include "prefill_worker/kv_senders.h"
#include "prefill_worker/lease_plan.h"
#include "prefill_worker/prefill_batcher.h"
#include "worker_common/caller_check.h"
#include "worker_common/phase_model.h"

namespace dq::prefill {

struct PrefillServiceOptions {
  std::string address;  // host:port this worker serves on (its identity)
  int io_timeout_ms = 10000;
  // The self drafter whose prompt KV this worker ships too (null: none); outlives the service.
  DrafterPrefill* drafter = nullptr;
  std::string worker_key;  // the deployment's worker credential (empty: any caller)
};

class PrefillService final : public dqserve::v1::PrefillWorker::Service {
 public:
  // All three must outlive the service.
  PrefillService(const worker::PhaseModel& model, PrefillBatcher& batcher, KvSenders& senders,
                 const PrefillServiceOptions& options);

  grpc::Status Prefill(grpc::ServerContext* context, const dqserve::v1::PrefillRequest* request,
                       dqserve::v1::PrefillResponse* response) override;
  grpc::Status Handshake(grpc::ServerContext* context, const dqserve::v1::HandshakeRequest* request,
                         dqserve::v1::HandshakeResponse* response) override;
  grpc::Status Health(grpc::ServerContext* context, const dqserve::v1::WorkerHealthRequest* request,
                      dqserve::v1::WorkerHealthResponse* response) override;

  // Who this worker is (the address is final once the server has bound its port).
  dqserve::v1::WorkerIdentity identity() const;
  void set_address(const std::string& address);

 private:
  // Checks the request and its lease, and builds the job (prepares the lease's regions).
  absl::StatusOr<std::shared_ptr<PrefillJob>> MakeJob(const grpc::ServerContext& context,
                                                      const dqserve::v1::PrefillRequest& request);
  absl::Status CheckPrompt(const dqserve::v1::PrefillRequest& request) const;
  absl::Status CheckLease(const dqserve::v1::KvLease& lease) const;
  // A hybrid model needs the lease's target state slot part, of its own layout, on a transport
  // it has; a pure-attention model refuses one. FailedPrecondition naming the lease and why.
  absl::Status CheckStatePart(const dqserve::v1::KvLease& lease) const;
  // The job's state writer, for a hybrid model (after CheckStatePart); its error fails the job.
  absl::Status PrepareState(const dqserve::v1::KvLease& lease, PrefillJob& job);
  // The job's drafter writer when the lease has a drafter part this worker can fill; else the
  // reason it cannot, in job.drafter_skipped (the request goes on without drafter KV).
  void PrepareDrafter(const std::string& lease_id, const dqserve::v1::StatePart& part,
                      PrefillJob& job);
  // Blocks until the engine finished `job`, flagging it cancelled if the caller goes away.
  void AwaitJob(grpc::ServerContext& context, PrefillJob& job);

  const worker::PhaseModel& model_;
  PrefillBatcher& batcher_;
  KvSenders& senders_;
  const PrefillServiceOptions options_;
  const worker::CallerCheck caller_;
  mutable std::mutex identity_mu_;
  dqserve::v1::WorkerIdentity identity_;  // under identity_mu_
};

}  // namespace dq::prefill
