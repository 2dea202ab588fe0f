#include "prefill_worker/kv_senders.h"

#include "common/logging.h"

namespace dq::prefill {

absl::StatusOr<std::unique_ptr<KvSenders>> KvSenders::Create(const KvSourceMemory& source,
                                                             const KvSendersOptions& options) {
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
    KvSender sender;
    DQ_ASSIGN_OR_RETURN(sender.transport, kvtransfer::CreateTransport(config));
    DQ_ASSIGN_OR_RETURN(kvtransfer::RegionHandle k,
                        sender.transport->RegisterRegion(source.keys, source.bytes));
    sender.keys = k.id;
    auto v = sender.transport->RegisterRegion(source.values, source.bytes);
    if (!v.ok()) {
      (void)sender.transport->ReleaseRegion(sender.keys);
      return v.status();
    }
    sender.values = v->id;
    out->kinds_.push_back(kind);
    out->senders_.emplace(kind, std::move(sender));
  }
  return out;
}

KvSenders::~KvSenders() {
  for (auto& [kind, s] : senders_) {
    for (kvtransfer::RegionId id : {s.keys, s.values}) {
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
