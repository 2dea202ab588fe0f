#include "prefill_worker/state_slot_writer.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "worker_common/lease_parts.h"

namespace dq::prefill {
namespace v1 = dqserve::v1;

absl::StatusOr<std::unique_ptr<StateSlotWriter>> StateSlotWriter::Create(KvSender& sender,
                                                                         const v1::StatePart& part,
                                                                         uint64_t slot_bytes,
                                                                         int io_timeout_ms) {
  if (sender.state_slots == 0) {
    return absl::FailedPreconditionError(
        "this prefill worker registered no state slots with its transport; it cannot write a "
        "hybrid model's recurrent state");
  }
  const v1::StateSlotLayout& l = part.slot_layout();
  if (worker::StateSlotBytes(l) != slot_bytes || part.endpoint().regions_size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the lease's state slot part holds ", worker::StateSlotBytes(l), " bytes in ",
                     part.endpoint().regions_size(), " regions; this worker's slot is ", slot_bytes,
                     " bytes, in one region"));
  }
  std::unique_ptr<StateSlotWriter> w(new StateSlotWriter(sender, part.endpoint().address(),
                                                         slot_bytes, l.layer_bytes(),
                                                         l.layers_size(), io_timeout_ms));
  auto id = sender.transport->Prepare(part.endpoint().regions(0).region_descriptor());
  if (!id.ok()) {
    const absl::StatusCode code = absl::IsInvalidArgument(id.status())
                                      ? absl::StatusCode::kInvalidArgument
                                      : absl::StatusCode::kUnavailable;
    return absl::Status(
        code, absl::StrCat("cannot reach the decode worker's state slot ", w->peer_, " (",
                           std::string(sender.transport->name()), "): ", id.status().message()));
  }
  w->remote_ = *id;
  return w;
}

StateSlotWriter::~StateSlotWriter() {
  if (remote_ == 0) return;
  absl::Status s = sender_.transport->ReleaseRemote(remote_);
  if (!s.ok()) spdlog::warn("releasing a remote state slot region: {}", s.ToString());
}

void StateSlotWriter::Fail(const absl::Status& s) {
  if (!error_.ok()) return;
  error_ = absl::UnavailableError(absl::StrCat("recurrent state transfer to the decode worker at ",
                                               peer_, " failed: ", s.ToString()));
}

void StateSlotWriter::PostLayer(int state_layer, int32_t local_slot) {
  if (!error_.ok() || state_layer < 0 || state_layer >= num_layers() || posted_[state_layer]) {
    return;
  }
  posted_[state_layer] = true;
  const uint64_t at = static_cast<uint64_t>(state_layer) * layer_bytes_;
  const kvtransfer::CopyOp op{static_cast<uint64_t>(local_slot) * slot_bytes_ + at, at,
                              layer_bytes_};
  auto id = sender_.transport->Post(sender_.state_slots, remote_, std::span(&op, 1));
  if (!id.ok()) {
    Fail(id.status());
    return;
  }
  pending_.push_back(*id);
  bytes_ += op.bytes;
}

void StateSlotWriter::PostRest(int32_t local_slot) {
  for (int l = 0; l < num_layers(); ++l) PostLayer(l, local_slot);
}

absl::Status StateSlotWriter::Wait() {
  // Every transfer must end before its source slot is reused, so keep waiting after a failure.
  for (kvtransfer::TransferId id : pending_) {
    absl::Status s = kvtransfer::WaitForTransfer(*sender_.transport, id, 2 * io_timeout_ms_);
    if (!s.ok()) Fail(s);
  }
  pending_.clear();
  if (error_.ok()) {
    for (int l = 0; l < num_layers(); ++l) {
      if (!posted_[l]) {
        Fail(absl::InternalError(absl::StrCat("state layer ", l, " was never posted")));
        break;
      }
    }
  }
  return error_;
}

}  // namespace dq::prefill
