#include "prefill_worker/kv_senders.h"

#include "common/logging.h"

namespace dq::prefill {

absl::StatusOr<std::unique_ptr<KvSenders>> KvSenders::Create(const KvSendersOptions& options) {
  if (options.kinds.empty()) {
    return absl::InvalidArgumentError("give at least one KV transport (e.g. --transports tcp)");
  }
  std::unique_ptr<KvSenders> out(new KvSenders());
  for (const std::string& kind : options.kinds) {
    if (out->senders_.count(kind)) {
      return absl::InvalidArgumentError(absl::StrCat("transport '", kind, "' is listed twice"));
    }
    kvtransfer::TransportConfig config;
    config.kind = kind;
    config.io_timeout_ms = options.io_timeout_ms;
    config.bind_address = options.bind_address;
    config.cuda_device = options.cuda_device;
    if (kind == "nccl" && options.cuda_device < 0) {
      return absl::FailedPreconditionError(
          "the nccl KV transport moves KV between GPUs, but this prefill worker keeps its KV on "
          "the CPU (--device cpu): run it with --device cuda:N or use --transports tcp");
    }
    KvSender sender;
    DQ_ASSIGN_OR_RETURN(sender.transport, kvtransfer::CreateTransport(config));
    sender.direct =
        sender.transport->supports_device_memory() || options.direct_for_tests.count(kind) != 0;
    out->kinds_.push_back(kind);
    out->senders_.emplace(kind, std::move(sender));
  }
  return out;
}

bool KvSenders::any_host() const {
  for (const auto& [kind, s] : senders_) {
    if (!s.direct) return true;
  }
  return false;
}

absl::Status KvSenders::Register(const KvSourceMemory& host, const KvSourceMemory& device) {
  for (auto& [kind, s] : senders_) {
    const KvSourceMemory& source = s.direct ? device : host;
    if (source.keys == nullptr && s.direct) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the ", kind,
          " KV transport moves GPU memory, but this prefill worker keeps its KV on "
          "the CPU (--device cpu): run it with --device cuda:N or use --transports tcp"));
    }
    if (source.keys == nullptr) {
      return absl::InternalError(absl::StrCat("no host KV source for the ", kind, " transport"));
    }
    DQ_ASSIGN_OR_RETURN(kvtransfer::RegionHandle k,
                        s.transport->RegisterRegion(source.keys, source.bytes));
    s.keys = k.id;
    auto v = s.transport->RegisterRegion(source.values, source.bytes);
    if (!v.ok()) return v.status();  // the destructor releases `keys`
    s.values = v->id;
    s.geometry = source.geometry;
  }
  return absl::OkStatus();
}

absl::Status KvSenders::RegisterStateSlots(char* data, uint64_t bytes) {
  for (auto& [kind, s] : senders_) {
    if (s.direct) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the ", kind,
          " KV transport moves GPU memory, but a hybrid model's recurrent state lives in host "
          "memory (the CPU backend); use --transports tcp"));
    }
    DQ_ASSIGN_OR_RETURN(kvtransfer::RegionHandle h, s.transport->RegisterRegion(data, bytes));
    s.state_slots = h.id;
  }
  return absl::OkStatus();
}

KvSenders::~KvSenders() {
  for (auto& [kind, s] : senders_) {
    for (kvtransfer::RegionId id : {s.keys, s.values, s.state_slots}) {
      if (id == 0) continue;
      absl::Status st = s.transport->ReleaseRegion(id);
      if (!st.ok()) spdlog::warn("releasing the {} KV source region: {}", kind, st.ToString());
    }
  }
}

KvSender* KvSenders::Find(const std::string& kind) {
  auto it = senders_.find(kind);
  return it == senders_.end() ? nullptr : &it->second;
}

}  // namespace dq::prefill
