// The sender side's in-flight transfers of one transport, by id: the bookkeeping behind
// Transport::Post / Poll that every connection-based backend (tcp, nccl) shares.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "kvtransfer/transport.h"

namespace dq::kvtransfer {

// T: a transfer with a `TransferId id` member and `TransferStatus status() const` (thread-safe).
// Thread-safe.
template <typename T>
class TransferTable {
 public:
  // Gives `t` a fresh id (never reused by this table) and tracks it; returns the id.
  TransferId Add(const std::shared_ptr<T>& t) {
    std::lock_guard lock(mu_);
    t->id = next_id_++;
    transfers_[t->id] = t;
    return t->id;
  }

  // Transport::Poll's contract: a terminal state is reported once, then the id is forgotten.
  TransferStatus Poll(TransferId id) {
    std::lock_guard lock(mu_);
    auto it = transfers_.find(id);
    if (it == transfers_.end()) {
      return {TransferState::kFailed,
              absl::NotFoundError(
                  absl::StrCat("transfer ", id, " is unknown (already reported done or failed)"))};
    }
    TransferStatus status = it->second->status();
    if (status.state != TransferState::kPending) transfers_.erase(it);
    return status;
  }

 private:
  std::mutex mu_;
  uint64_t next_id_ = 1;
  std::map<TransferId, std::shared_ptr<T>> transfers_;
};

}  // namespace dq::kvtransfer
