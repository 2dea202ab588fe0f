#include "decode_worker/decode_server.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "worker_common/worker_identity.h"

namespace dq::decode {

absl::StatusOr<std::unique_ptr<DecodeServer>> DecodeServer::Start(
    worker::PhaseModel& model, const DecodeServerOptions& options) {
  std::unique_ptr<DecodeServer> server(new DecodeServer(model));
  absl::Status s = server->Init(options);
  if (!s.ok()) {
    server->Shutdown(std::chrono::milliseconds(0));
    return s;
  }
  return server;
}

absl::Status DecodeServer::Init(const DecodeServerOptions& o) {
  if (o.transport != "tcp" && o.transport != "ucx" && o.transport != "nccl") {
    return absl::InvalidArgumentError(
        absl::StrCat("--transport must be tcp, ucx or nccl (the decode worker's KV receive side), "
                     "got ",
                     o.transport));
  }
  if (model_.kv_staging == nullptr) {
    return absl::InternalError("the decode model has no KV staging (load it with LoadPhaseModel)");
  }
  if (o.transport == "nccl" && model_.kv_staging->cuda_device() < 0) {
    return absl::FailedPreconditionError(
        "--transport nccl moves KV between GPUs, but this decode worker keeps its KV on the CPU "
        "(--device cpu): run it with --device cuda:N or use --transport tcp");
  }
  kvtransfer::TransportConfig tc;
  tc.kind = o.transport;
  tc.bind_address = o.transfer_host;
  tc.cuda_device = model_.kv_staging->cuda_device();  // nccl: the cache's GPU
  DQ_ASSIGN_OR_RETURN(transport_, kvtransfer::CreateTransport(tc));
  KvBlockPool& pool = model_.runner->kv_pool();
  leases_ = std::make_unique<KvLeaseTable>(pool);
  regions_ = std::make_unique<LeaseRegions>(*transport_, *model_.kv_staging, o.direct_for_tests);
  // Regions go before blocks: a lease's late writes are refused instead of landing in blocks
  // that another request owns by then.
  leases_->set_free_hook([r = regions_.get()](const KvLease& l) { r->Release(l.lease_id); });
  DecodeBatcherOptions bo;
  bo.max_batch = o.max_batch;
  bo.eos_token_ids = model_.model->config.eos_token_ids;
  if (model_.kv_staging->staged() && !regions_->direct()) {
    // The KV arrives in each lease's staging buffer; it enters the cache at commit.
    bo.land_kv = [r = regions_.get()](const std::string& lease_id) { return r->Land(lease_id); };
  }
  DQ_RETURN_IF_ERROR(CreateServingDrafter(o, &bo));
  batcher_ = std::make_unique<DecodeBatcher>(*model_.runner, *leases_, std::move(bo));

  DecodeServiceOptions so;
  so.lease_ttl_ms = o.lease_ttl_ms;
  service_ = std::make_unique<DecodeService>(
      DecodeServiceParts{&model_, leases_.get(), regions_.get(), batcher_.get(), transport_.get()},
      so);
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(absl::StrCat(o.host, ":", o.port), grpc::InsecureServerCredentials(),
                           &bound_port);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || bound_port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", o.host, ":", o.port,
                                               " (in use, or not an address of this host)"));
  }
  address_ = absl::StrCat(o.host, ":", bound_port);
  identity_ = worker::WorkerIdentityOf(model_, {"decode", address_, {o.transport}});
  // The identity names the bound port, known only now; no call reads it before Start returns
  // except Handshake/Health racing a client that guessed the port.
  service_->set_identity(identity_);
  reaper_ = std::thread([this, o] { ReapLoop(std::chrono::milliseconds(o.reap_interval_ms)); });
  return absl::OkStatus();
}

absl::Status DecodeServer::CreateServingDrafter(const DecodeServerOptions& o,
                                                DecodeBatcherOptions* bo) {
  if (o.speculative == "none" || o.speculative.empty()) return absl::OkStatus();
  if (o.speculative != "ngram") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--speculative ", o.speculative,
        ": the decode worker drafts with ngram only so far (or none); the self drafter needs "
        "its prompt KV, which does not cross the prefill/decode split yet"));
  }
  bo->spec.k = o.spec_k;
  DQ_RETURN_IF_ERROR(Validate(bo->spec));
  DQ_ASSIGN_OR_RETURN(drafter_, CreateDrafter(o.speculative, model_.runner->config()));
  bo->drafter = drafter_.get();
  return absl::OkStatus();
}

void DecodeServer::ReapLoop(std::chrono::milliseconds interval) {
  std::unique_lock lock(reap_mu_);
  while (!reap_cv_.wait_for(lock, interval, [&] { return stopping_; })) {
    // The free hook releases each reclaimed lease's regions before its blocks return.
    const int n = leases_->ReclaimExpired();
    if (n > 0) spdlog::info("dq-decode: reclaimed {} lease(s) not committed within their ttl", n);
  }
}

void DecodeServer::Shutdown(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(reap_mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  reap_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  // gRPC cancels the calls still running at the deadline; their handlers then abort their
  // sequences, so no stream outlives this.
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + grace);
  if (batcher_) batcher_->Shutdown();
  if (server_) server_->Wait();
}

DecodeServer::~DecodeServer() { Shutdown(std::chrono::milliseconds(0)); }

}  // namespace dq::decode
