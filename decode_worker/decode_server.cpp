#include "decode_worker/decode_server.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "engine/spec/self_drafter.h"
#include "worker_common/device_backend.h"
#include "worker_common/worker_identity.h"

namespace dq::decode {
namespace v1 = dqserve::v1;
namespace {
constexpr int kMaxDrafterKvTokens = 8192;
}  // namespace

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
  DecodeBatcherOptions bo;
  bo.max_batch = o.max_batch;
  bo.eos_token_ids = model_.model->config.eos_token_ids;
  if (model_.kv_staging->staged() && !regions_->direct()) {
    // The KV arrives in each lease's staging buffer; it enters the cache at commit.
    bo.land_kv = [r = regions_.get()](const std::string& lease_id) { return r->Land(lease_id); };
  }
  DQ_RETURN_IF_ERROR(CreateServingDrafter(o, &bo));
  // Regions go before blocks: a lease's late writes are refused instead of landing in blocks
  // that another request owns by then.
  leases_->set_free_hook([r = regions_.get(), d = drafter_regions_.get()](const KvLease& l) {
    r->Release(l.lease_id);
    if (d != nullptr) d->Release(l.lease_id);
  });
  batcher_ = std::make_unique<DecodeBatcher>(*model_.runner, *leases_, std::move(bo));

  DecodeServiceOptions so;
  so.lease_ttl_ms = o.lease_ttl_ms;
  service_ = std::make_unique<DecodeService>(
      DecodeServiceParts{&model_, leases_.get(), regions_.get(), batcher_.get(), transport_.get(),
                         drafter_regions_.get()},
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
  if (o.speculative == "none" || o.speculative.empty()) {
    if (o.drafter.enabled()) {
      return absl::InvalidArgumentError(
          "--draft-format/--draft-weights give the self drafter its weights; add "
          "--speculative self");
    }
    return absl::OkStatus();
  }
  bo->spec.k = o.spec_k;
  DQ_RETURN_IF_ERROR(Validate(bo->spec));
  if (o.speculative == "self") return CreateSelfDrafter(o, bo);
  if (o.drafter.enabled()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--draft-format/--draft-weights are the self drafter's; --speculative ",
                     o.speculative, " takes no weights"));
  }
  if (o.speculative != "ngram") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--speculative ", o.speculative, ": the decode worker drafts with none, ngram or self"));
  }
  DQ_ASSIGN_OR_RETURN(drafter_, CreateDrafter(o.speculative, model_.runner->config()));
  bo->drafter = drafter_.get();
  return absl::OkStatus();
}

absl::Status DecodeServer::CreateSelfDrafter(const DecodeServerOptions& o,
                                             DecodeBatcherOptions* bo) {
  if (!o.drafter.enabled()) {
    return absl::InvalidArgumentError(
        "--speculative self needs the drafter's weights: --draft-format F (the model quantized "
        "to F at load, e.g. int4) or --draft-weights CHECKPOINT");
  }
  DQ_ASSIGN_OR_RETURN(drafter_weights_, worker::LoadDrafterWeights(model_, o.drafter, o.threads));
  const ModelConfig& target = model_.runner->config();
  DQ_ASSIGN_OR_RETURN(BackendFactory backend,
                      worker::BackendForDevice(model_.device, worker::DeviceBackendOptions{}));
  SelfDrafterOptions so;
  so.threads = o.threads;
  so.kv_block_size = model_.runner->kv_pool().block_size();
  // The target pool's tokens, at most kMaxDrafterKvTokens: a sequence whose drafter KV does not
  // fit decodes without drafts (never an error), so the drafter needs no reservation of its own.
  so.kv_capacity = std::min(model_.runner->kv_pool().options().num_blocks * so.kv_block_size,
                            kMaxDrafterKvTokens);
  so.backend = std::move(backend);
  DQ_ASSIGN_OR_RETURN(
      std::unique_ptr<SelfDrafter> self,
      SelfDrafter::Create(*drafter_weights_->checkpoint, drafter_weights_->config, so));
  DQ_RETURN_IF_ERROR(self->CheckTarget(target));
  DQ_ASSIGN_OR_RETURN(drafter_staging_, worker::CreateKvStaging(self->runner(), model_.device));
  SelfDrafter* d = self.get();
  drafter_ = std::move(self);
  bo->drafter = drafter_.get();
  // A device-memory transport (nccl) writes device memory only: the drafter's prompt KV is
  // then computed here (no host staging buffer it could write).
  if (!transport_->supports_device_memory()) {
    drafter_regions_ = std::make_unique<DrafterKvRegions>(
        *transport_, *drafter_staging_, worker::DrafterKvLayout(d->runner(), *drafter_staging_),
        worker::DrafterFingerprint(*drafter_weights_));
    spdlog::info(
        "dq-decode: self drafter {} ({}), prompt KV from the prefill worker when it "
        "runs the same drafter",
        o.drafter.weights.empty() ? o.drafter.format : o.drafter.weights,
        drafter_regions_->fingerprint());
  }
  bo->begin_draft = [d, regions = drafter_regions_.get()](
                        uint64_t sequence, std::span<const int32_t> prompt,
                        const ShippedDrafterKv* shipped) -> absl::StatusOr<v1::DrafterPrompt> {
    if (shipped != nullptr && regions != nullptr) {
      DQ_RETURN_IF_ERROR(d->BeginWithKv(
          sequence, prompt, [&](const KvSequence& kv) { return regions->Land(*shipped, kv); }));
      return v1::DRAFTER_PROMPT_SHIPPED;
    }
    DQ_RETURN_IF_ERROR(d->Begin(sequence, prompt));
    return v1::DRAFTER_PROMPT_RECOMPUTED;
  };
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
