// Writes one request's recurrent state (a hybrid model's per-sequence state slot) into its
// decode lease's state slot part (STATE_PART_KIND_STATE_SLOT): each layer's part of the slot is
// posted as soon as the prompt's last forward pass has finished that layer
// (ForwardHooks::on_layer_state_written), the layers whose hook did not run after the pass, and
// every posted transfer is waited for before the slot is reused. The first failure sticks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "dqserve/v1/worker.pb.h"
#include "prefill_worker/kv_senders.h"

namespace dq::prefill {

class StateSlotWriter {
 public:
  // Prepares the part's one region on `sender`'s transport (connecting to the decode worker);
  // `slot_bytes` is the local slot's size (every local slot is that far apart in the sender's
  // state slot region). Errors: InvalidArgument (a part whose slot is not `slot_bytes`, a
  // malformed descriptor), Unavailable (peer unreachable), FailedPrecondition (the sender has no
  // state slots registered).
  static absl::StatusOr<std::unique_ptr<StateSlotWriter>> Create(KvSender& sender,
                                                                 const dqserve::v1::StatePart& part,
                                                                 uint64_t slot_bytes,
                                                                 int io_timeout_ms);
  // Forgets the prepared region. Precondition: Wait() was called after the last Post.
  ~StateSlotWriter();
  StateSlotWriter(const StateSlotWriter&) = delete;
  StateSlotWriter& operator=(const StateSlotWriter&) = delete;

  // Queues layer `state_layer`'s part of local slot `local_slot` (once per layer; a second call
  // for the same layer does nothing). Never blocks on the network.
  void PostLayer(int state_layer, int32_t local_slot);
  // Queues every layer not posted yet (after the pass; a backend may skip the hook).
  void PostRest(int32_t local_slot);
  // Waits until every posted transfer is done or failed; the first error so far (Unavailable
  // naming the decode worker), OK otherwise. Also an error when some layer was never posted.
  absl::Status Wait();

  uint64_t bytes_posted() const { return bytes_; }
  int num_layers() const { return static_cast<int>(posted_.size()); }

 private:
  StateSlotWriter(KvSender& sender, std::string peer, uint64_t slot_bytes, uint64_t layer_bytes,
                  int layers, int io_timeout_ms)
      : sender_(sender),
        peer_(std::move(peer)),
        slot_bytes_(slot_bytes),
        layer_bytes_(layer_bytes),
        io_timeout_ms_(io_timeout_ms),
        posted_(layers, false) {}
  void Fail(const absl::Status& s);

  KvSender& sender_;
  const std::string peer_;
  const uint64_t slot_bytes_;
  const uint64_t layer_bytes_;
  const int io_timeout_ms_;
  kvtransfer::RemoteRegionId remote_ = 0;
  std::vector<bool> posted_;
  std::vector<kvtransfer::TransferId> pending_;
  absl::Status error_;
  uint64_t bytes_ = 0;
};

}  // namespace dq::prefill
