#include "prefill_worker/prefill_server.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <algorithm>
#include <chrono>

#include "common/listen_port.h"
#include "common/logging.h"
#include "worker_common/server_credentials.h"

namespace dq::prefill {
namespace {

absl::StatusOr<std::unique_ptr<DrafterPrefill>> CreateDrafter(const worker::PhaseModel& model,
                                                              const PrefillServerOptions& options,
                                                              const KvSendersOptions& senders,
                                                              int arena_blocks) {
  DrafterPrefillOptions o;
  o.kind = options.drafter_kind;
  o.weights = options.drafter;
  o.threads = options.drafter_threads;
  const KvCacheOptions& kv = model.runner->kv_pool().options();
  // A job whose drafter KV does not fit ships none (the decode worker computes it): the pool
  // needs no more than a few prompts' worth.
  o.kv_capacity_tokens =
      std::min(kv.num_blocks * kv.block_size, std::max(8192, options.token_budget));
  o.arena_blocks = arena_blocks;
  o.max_batch_tokens = std::max(options.token_budget, 8192);
  o.senders = senders;
  // The decode worker takes drafter KV over host-memory transports only (its drafter's blocks
  // are taken when the sequence starts, so it stages them); nccl leases carry no drafter part.
  std::erase(o.senders.kinds, std::string("nccl"));
  if (o.senders.kinds.empty()) {
    return absl::InvalidArgumentError(
        "the drafter's prompt KV ships over tcp (or ucx, local), not nccl; add tcp to "
        "--transports or drop --draft-format/--draft-weights (the decode worker then computes "
        "it)");
  }
  DQ_ASSIGN_OR_RETURN(std::unique_ptr<DrafterPrefill> d, DrafterPrefill::Create(model, o));
  spdlog::info("dq-prefill: {} drafter {} ({}), its prompt KV shipped with the target's", d->kind(),
               options.drafter.weights.empty() ? options.drafter.format : options.drafter.weights,
               d->fingerprint());
  return d;
}

}  // namespace

namespace {

// A hybrid model: its state slots become a copy source, and what the state cannot do yet is
// refused by name.
absl::Status SetUpStateSlots(worker::PhaseModel& model, const PrefillServerOptions& options,
                             KvSenders& senders) {
  if (!model.state_slot) return absl::OkStatus();
  const std::string& arch = model.runner->config().architecture;
  if (options.prefix_cache) {
    return absl::UnimplementedError(absl::StrCat(
        "--prefix-cache: ", arch,
        " is a hybrid model whose recurrent state has no snapshots at block boundaries yet, so "
        "a cached prefix cannot be resumed; run it without --prefix-cache"));
  }
  if (options.drafter.enabled()) {
    return absl::UnimplementedError(absl::StrCat(
        "--draft-format/--draft-weights: ", arch,
        " is a hybrid model, on which speculative decoding is not supported yet; drop the "
        "drafter"));
  }
  StateSlotPool& slots = model.runner->kv_pool().state_slots();
  return senders.RegisterStateSlots(reinterpret_cast<char*>(slots.data()), slots.region_bytes());
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrefillServer>> PrefillServer::Start(
    std::unique_ptr<worker::PhaseModel> model, const PrefillServerOptions& options) {
  if (options.token_budget < 1) {
    return absl::InvalidArgumentError(absl::StrCat("the token budget must be >= 1 (got ",
                                                   options.token_budget, "); 2048 is typical"));
  }
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port ", options.port, " is not in [0, 65535]"));
  }
  if (model == nullptr || model->kv_staging == nullptr) {
    return absl::InternalError("the prefill model has no KV staging (load it with LoadPhaseModel)");
  }
  std::unique_ptr<PrefillServer> s(new PrefillServer(options));
  s->model_ = std::move(model);
  // A device cache ships through an arena that holds one iteration: a budget's chunk, which may
  // start mid-block, plus room for the partial blocks of the short prompts batched with it.
  const int arena_blocks = s->model_->runner->kv_pool().BlocksFor(options.token_budget) + 1 +
                           std::max(0, options.staging_extra_blocks);
  KvSendersOptions so;
  so.kinds = options.transports;
  so.io_timeout_ms = options.io_timeout_ms;
  so.cuda_device = s->model_->kv_staging->cuda_device();
  so.direct_for_tests = options.direct_for_tests;
  std::unique_ptr<KvSenders> senders;
  DQ_ASSIGN_OR_RETURN(senders, KvSenders::Create(so));
  // Only host-memory transports need the arena (a GPU worker with nccl alone has none).
  DQ_ASSIGN_OR_RETURN(s->stager_,
                      KvStager::Create(*s->model_->kv_staging, arena_blocks, senders->any_host()));
  DQ_RETURN_IF_ERROR(senders->Register(s->stager_->host_source(), s->stager_->device_source()));
  DQ_RETURN_IF_ERROR(SetUpStateSlots(*s->model_, options, *senders));
  s->senders_ = std::move(senders);
  if (options.prefix_cache && s->stager_->max_blocks() > 0) {
    // The batcher would leave the cache off for every job (its shipped cached blocks could
    // overflow the arena): refuse rather than accept a flag that does nothing.
    return absl::InvalidArgumentError(
        "--prefix-cache: this worker's KV is in device memory and ships through a host staging "
        "arena, which cannot take the cached blocks yet; run without --prefix-cache, or with a "
        "transport that reads device memory (--transports nccl, or ucx with CUDA)");
  }
  PrefillBatcherOptions bo{options.token_budget};
  bo.prefix_cache = options.prefix_cache;
  if (options.drafter.enabled()) {
    DQ_ASSIGN_OR_RETURN(s->drafter_, CreateDrafter(*s->model_, options, so, arena_blocks));
    bo.drafter = s->drafter_.get();
  }
  s->batcher_ = std::make_unique<PrefillBatcher>(*s->model_->runner, *s->stager_, bo);

  DQ_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                      worker::WorkerServerCredentials());
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port in use fails, never shared
  int bound = 0;
  builder.AddListeningPort(options.host + ":" + std::to_string(options.port), credentials, &bound);
  // The identity carries the address, known only once bound (port 0): set_address fixes it.
  PrefillServiceOptions svc{options.host + ":" + std::to_string(options.port),
                            options.io_timeout_ms, s->drafter_.get(), options.worker_key};
  auto service = std::make_unique<PrefillService>(*s->model_, *s->batcher_, *s->senders_, svc);
  builder.RegisterService(service.get());
  AddStandardGrpcServices(builder);  // grpc.health.v1 + reflection
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || bound == 0) {
    DQ_RETURN_IF_ERROR(ProbeListen(options.host, options.port));
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.host, ":", options.port,
                                               " (with TLS: is the key the certificate's?)"));
  }
  s->port_ = bound;
  s->health_ = std::make_unique<GrpcHealthPublisher>(
      *s->server_, std::vector<std::string>{dqserve::v1::PrefillWorker::service_full_name()},
      nullptr);
  service->set_address(s->address());
  s->service_ = std::move(service);
  return s;
}

PrefillServer::~PrefillServer() { Shutdown(); }

void PrefillServer::Shutdown(int grace_ms) {
  if (shut_down_) return;
  shut_down_ = true;
  if (health_) health_->Shutdown();  // NOT_SERVING while draining
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms));
  }
  // After the server: calls still waiting on the engine were cancelled above and finish at
  // their next chunk boundary; anything left is failed by Stop.
  if (batcher_) batcher_->Stop();
  if (server_) server_->Wait();
}

void PrefillServer::Wait() {
  if (server_) server_->Wait();
}

}  // namespace dq::prefill
