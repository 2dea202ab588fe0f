#include "decode_worker/decode_server.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/listen_port.h"
#include "common/logging.h"
#include "decode_worker/target_prompt_features.h"
#include "engine/spec/dflash_drafter.h"
#include "engine/spec/self_drafter.h"
#include "worker_common/device_backend.h"
#include "worker_common/server_credentials.h"
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
  regions_ = std::make_unique<LeasePartRegions>(*transport_, *model_.kv_staging,
                                                worker::KvLayoutOf(model_), o.direct_for_tests);
  DQ_RETURN_IF_ERROR(SetUpStateSlots(o));
  DecodeBatcherOptions bo;
  bo.max_batch = o.max_batch;
  bo.eos_token_ids = model_.model->config.eos_token_ids;
  if (model_.kv_staging->staged() && !regions_->direct()) {
    // The KV arrives in each lease's staging buffer; it enters the cache at commit.
    bo.land_kv = [r = regions_.get()](const std::string& lease_id) { return r->Land(lease_id); };
  }
  DQ_RETURN_IF_ERROR(CreateServingDrafter(o, &bo));
  DQ_RETURN_IF_ERROR(SetUpPrefixCache(o, &bo));
  // Regions go before blocks: a lease's late writes are refused instead of landing in blocks
  // that another request owns by then.
  leases_->set_free_hook([r = regions_.get()](const KvLease& l) { r->Release(l.lease_id); });
  batcher_ = std::make_unique<DecodeBatcher>(*model_.runner, *leases_, std::move(bo));

  DecodeServiceOptions so;
  so.lease_ttl_ms = o.lease_ttl_ms;
  so.worker_key = o.worker_key;
  service_ = std::make_unique<DecodeService>(
      DecodeServiceParts{&model_, leases_.get(), regions_.get(), batcher_.get(), transport_.get()},
      so);
  DQ_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                      worker::WorkerServerCredentials());
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port in use fails, never shared
  int bound_port = 0;
  builder.AddListeningPort(absl::StrCat(o.host, ":", o.port), credentials, &bound_port);
  builder.RegisterService(service_.get());
  AddStandardGrpcServices(builder);  // grpc.health.v1 + reflection
  server_ = builder.BuildAndStart();
  if (!server_ || bound_port == 0) {
    DQ_RETURN_IF_ERROR(ProbeListen(o.host, o.port));
    return absl::UnavailableError(absl::StrCat("cannot listen on ", o.host, ":", o.port,
                                               " (with TLS: is the key the certificate's?)"));
  }
  address_ = absl::StrCat(o.host, ":", bound_port);
  health_ = std::make_unique<GrpcHealthPublisher>(
      *server_, std::vector<std::string>{dqserve::v1::DecodeWorker::service_full_name()}, nullptr);
  identity_ = worker::WorkerIdentityOf(model_, {"decode", address_, {o.transport}});
  identity_.set_prefix_cache(o.prefix_cache);
  // What its leases hold, part by part (a drafter's KV included), as its peers must know it.
  *identity_.mutable_manifest() = regions_->manifest();
  // The identity names the bound port, known only now; no call reads it before Start returns
  // except Handshake/Health racing a client that guessed the port.
  service_->set_identity(identity_);
  reaper_ = std::thread([this, o] { ReapLoop(std::chrono::milliseconds(o.reap_interval_ms)); });
  return absl::OkStatus();
}

absl::Status DecodeServer::SetUpStateSlots(const DecodeServerOptions& o) {
  if (!model_.state_slot) return absl::OkStatus();
  const std::string& arch = model_.runner->config().architecture;
  // Neither keeps a snapshot of the recurrent state: a cached prefix or a rejected draft would
  // leave the slot at the wrong position (docs/design.md: snapshots at block boundaries).
  if (o.prefix_cache) {
    return absl::UnimplementedError(absl::StrCat(
        "--prefix-cache: ", arch,
        " is a hybrid model whose recurrent state has no snapshots at block boundaries yet, so "
        "a cached prefix cannot be resumed; run it without --prefix-cache"));
  }
  if (o.speculative != "none" && !o.speculative.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        "--speculative ", o.speculative, ": ", arch,
        " is a hybrid model whose recurrent state cannot roll back to the accepted position "
        "yet, so speculative decoding would not be lossless; run it with --speculative none"));
  }
  regions_->AddStateSlots(model_.runner->kv_pool().state_slots(), *model_.state_slot);
  spdlog::info("dq-decode: {} keeps {} recurrent state slots of {} bytes ({} layers)", arch,
               model_.runner->kv_pool().state_slots().num_slots(),
               model_.runner->kv_pool().state_slots().slot_bytes(),
               model_.state_slot->layers_size());
  return absl::OkStatus();
}

absl::Status DecodeServer::SetUpPrefixCache(const DecodeServerOptions& o,
                                            DecodeBatcherOptions* bo) {
  if (o.assistant_kv != "reuse" && o.assistant_kv != "reprefill") {
    return absl::InvalidArgumentError(
        absl::StrCat("--assistant-kv must be reuse or reprefill, got '", o.assistant_kv, "'"));
  }
  if (!o.prefix_cache) return absl::OkStatus();
  if (o.speculative != "none" && o.speculative != "ngram") {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefix-cache with --speculative ", o.speculative,
                     ": the drafter's prompt KV is not cached; drop one of them"));
  }
  leases_->set_prefix_cache(true);
  bo->keep_kv = o.assistant_kv == "reuse" ? KeepKv::kPromptAndAnswer : KeepKv::kPrompt;
  spdlog::info("dq-decode: prefix cache on; finished requests keep their {} KV",
               o.assistant_kv == "reuse" ? "prompt and answer" : "prompt");
  return absl::OkStatus();
}

absl::Status DecodeServer::CreateServingDrafter(const DecodeServerOptions& o,
                                                DecodeBatcherOptions* bo) {
  if (o.speculative == "none" || o.speculative.empty()) {
    if (o.drafter.enabled()) {
      return absl::InvalidArgumentError(
          "--draft-format/--draft-weights give a drafter its weights; add --speculative self "
          "(or --speculative dflash with --draft-weights DIR)");
    }
    return absl::OkStatus();
  }
  bo->spec.k = o.spec_k;
  DQ_RETURN_IF_ERROR(Validate(bo->spec));
  if (o.speculative == "self") return CreateSelfDrafter(o, bo);
  if (o.speculative == "dflash") return CreateDFlashDrafter(o, bo);
  if (o.drafter.enabled()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--draft-format/--draft-weights are the self and dflash drafters'; "
                     "--speculative ",
                     o.speculative, " takes no weights"));
  }
  if (o.speculative != "ngram") {
    return absl::InvalidArgumentError(
        absl::StrCat("--speculative ", o.speculative,
                     ": the decode worker drafts with none, ngram, self or dflash"));
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
    const std::string fingerprint = worker::DrafterFingerprint(*drafter_weights_);
    regions_->AddDrafterKv(*drafter_staging_,
                           worker::DrafterKvLayout(d->runner(), *drafter_staging_), fingerprint);
    spdlog::info(
        "dq-decode: self drafter {} ({}), prompt KV from the prefill worker when it "
        "runs the same drafter",
        o.drafter.weights.empty() ? o.drafter.format : o.drafter.weights, fingerprint);
  }
  bo->begin_draft = [d, regions = regions_.get()](
                        uint64_t sequence, std::span<const int32_t> prompt,
                        const ShippedDrafterKv* shipped) -> absl::StatusOr<v1::DrafterPrompt> {
    if (shipped != nullptr && regions->has_drafter_kv()) {
      DQ_RETURN_IF_ERROR(d->BeginWithKv(sequence, prompt, [&](const KvSequence& kv) {
        return regions->LandDrafterKv(*shipped, kv);
      }));
      return v1::DRAFTER_PROMPT_SHIPPED;
    }
    DQ_RETURN_IF_ERROR(d->Begin(sequence, prompt));
    return v1::DRAFTER_PROMPT_RECOMPUTED;
  };
  return absl::OkStatus();
}

absl::Status DecodeServer::CreateDFlashDrafter(const DecodeServerOptions& o,
                                               DecodeBatcherOptions* bo) {
  if (o.drafter.weights.empty() || !o.drafter.format.empty() || o.drafter.group_size != 0) {
    return absl::InvalidArgumentError(
        "--speculative dflash needs --draft-weights DIR (a DFlash drafter checkpoint made for "
        "this model, e.g. by dq-tool make-dflash) and no --draft-format/--draft-group-size");
  }
  KvBlockPool& pool = model_.runner->kv_pool();
  DFlashDrafterOptions d;
  d.threads = o.threads;
  d.kv_block_size = pool.block_size();
  // As the self drafter's: a sequence whose context does not fit decodes without drafts.
  d.kv_capacity = std::min(pool.options().num_blocks * d.kv_block_size, kMaxDrafterKvTokens);
  DQ_ASSIGN_OR_RETURN(std::unique_ptr<DFlashDrafter> dflash,
                      DFlashDrafter::Load(o.drafter.weights, *model_.phase_weights().checkpoint,
                                          model_.runner->config(), d, &dflash_checkpoint_));
  if (o.spec_k > dflash->max_draft_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--spec-k ", o.spec_k, " is more than the dflash drafter drafts in one step (",
        dflash->max_draft_tokens(), "); use --spec-k ", dflash->max_draft_tokens(), " or less"));
  }
  drafter_staging_ = worker::CreateHostCopyKvStaging(dflash->kv_pool());
  DFlashDrafter* dd = dflash.get();
  drafter_ = std::move(dflash);
  bo->drafter = drafter_.get();
  std::string shipped_as = "not over this transport";
  if (!transport_->supports_device_memory()) {
    shipped_as = worker::DFlashFingerprint(dd->config(), *dflash_checkpoint_);
    regions_->AddDrafterKv(*drafter_staging_,
                           worker::DrafterKvLayout("dflash", dd->kv_pool(), *drafter_staging_),
                           shipped_as);
  }
  spdlog::info(
      "dq-decode: dflash drafter {} ({} layers, block {}, target layers {}), prompt context "
      "from the prefill worker when it runs the same drafter ({})",
      o.drafter.weights, dd->config().layers.num_layers, dd->config().block_size,
      dd->target_layers().size(), shipped_as);
  bo->begin_draft = [dd, runner = model_.runner.get(), regions = regions_.get()](
                        uint64_t sequence, std::span<const int32_t> prompt,
                        const ShippedDrafterKv* shipped) -> absl::StatusOr<v1::DrafterPrompt> {
    if (shipped != nullptr && regions->has_drafter_kv()) {
      const absl::Status landed = dd->BeginWithContext(
          sequence, static_cast<int>(prompt.size()),
          [&](const KvSequence& kv) { return regions->LandDrafterKv(*shipped, kv); });
      if (landed.ok()) return v1::DRAFTER_PROMPT_SHIPPED;
      // The recomputed context waits for pool room if that was short; drafting starts then.
      spdlog::warn("dq-decode: the shipped dflash context did not land ({}); computing it here",
                   landed.ToString());
    }
    DQ_RETURN_IF_ERROR(ObservePromptOnTarget(*runner, *dd, sequence, prompt));
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
  if (health_) health_->Shutdown();  // NOT_SERVING while draining
  if (reaper_.joinable()) reaper_.join();
  // gRPC cancels the calls still running at the deadline; their handlers then abort their
  // sequences, so no stream outlives this.
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + grace);
  if (batcher_) batcher_->Shutdown();
  if (server_) server_->Wait();
}

DecodeServer::~DecodeServer() { Shutdown(std::chrono::milliseconds(0)); }

}  // namespace dq::decode
