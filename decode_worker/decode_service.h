// The dqserve.v1.DecodeWorker gRPC service: leases KV blocks to prefill workers (Reserve),
// streams the decode of committed leases (Decode), and frees what the router gives up (Release,
// Abort). Thin: leases live in KvLeaseTable, every part's transfer regions in LeasePartRegions,
// the model in DecodeBatcher.
#pragma once

#include <mutex>
#include <string>

#include "decode_worker/decode_batcher.h"
#include "decode_worker/kv_lease_table.h"
#include "decode_worker/lease_part_regions.h"
#include "dqserve/v1/worker.grpc.pb.h"
#include "kvtransfer/transport.h"
#include "worker_common/caller_check.h"
#include "worker_common/phase_model.h"

namespace dq::decode {

struct DecodeServiceOptions {
  int lease_ttl_ms = 120000;  // an uncommitted lease lives this long at most
  int stream_poll_ms = 50;    // how often a Decode handler checks for cancellation
  std::string worker_key;     // the deployment's worker credential (empty: any caller)
};

// The parts the service drives; all must outlive it.
struct DecodeServiceParts {
  worker::PhaseModel* model = nullptr;
  KvLeaseTable* leases = nullptr;
  // Every lease part's regions: the target's KV, a hybrid model's state slot, a drafter's KV.
  LeasePartRegions* regions = nullptr;
  DecodeBatcher* batcher = nullptr;
  kvtransfer::Transport* transport = nullptr;
};

class DecodeService final : public dqserve::v1::DecodeWorker::Service {
 public:
  DecodeService(DecodeServiceParts parts, DecodeServiceOptions options)
      : p_(parts), options_(std::move(options)), caller_(options_.worker_key) {}

  // Who this worker is (role "decode", address, layout, checkpoint); set once the port is bound.
  void set_identity(dqserve::v1::WorkerIdentity identity) {
    std::lock_guard lock(identity_mu_);
    identity_ = std::move(identity);
  }

  grpc::Status Reserve(grpc::ServerContext* context, const dqserve::v1::ReserveRequest* request,
                       dqserve::v1::KvLease* response) override;
  grpc::Status Decode(grpc::ServerContext* context, const dqserve::v1::DecodeRequest* request,
                      grpc::ServerWriter<dqserve::v1::DecodeResponse>* writer) override;
  grpc::Status Release(grpc::ServerContext* context, const dqserve::v1::ReleaseRequest* request,
                       dqserve::v1::ReleaseResponse* response) override;
  grpc::Status Abort(grpc::ServerContext* context, const dqserve::v1::AbortRequest* request,
                     dqserve::v1::AbortResponse* response) override;
  grpc::Status Handshake(grpc::ServerContext* context, const dqserve::v1::HandshakeRequest* request,
                         dqserve::v1::HandshakeResponse* response) override;
  grpc::Status Health(grpc::ServerContext* context, const dqserve::v1::WorkerHealthRequest* request,
                      dqserve::v1::WorkerHealthResponse* response) override;

 private:
  // Checks a Reserve request and works out its ttl; the error says what to fix.
  absl::StatusOr<std::chrono::milliseconds> CheckReserve(
      const dqserve::v1::ReserveRequest& request) const;
  // The job for a Decode request (sampling validated against the model).
  absl::StatusOr<DecodeJob> JobOf(const dqserve::v1::DecodeRequest& request) const;
  // Releases the lease's transfer regions (the prefill worker is done writing).
  void ReleaseRegions(const std::string& lease_id);
  // Forwards the stream's tokens to the client until it ends or the client goes away.
  grpc::Status Pump(grpc::ServerContext* context, DecodeStream& stream,
                    grpc::ServerWriter<dqserve::v1::DecodeResponse>* writer);

  dqserve::v1::WorkerIdentity identity() const {
    std::lock_guard lock(identity_mu_);
    return identity_;
  }

  DecodeServiceParts p_;
  DecodeServiceOptions options_;
  worker::CallerCheck caller_;
  mutable std::mutex identity_mu_;
  dqserve::v1::WorkerIdentity identity_;
};

}  // namespace dq::decode
