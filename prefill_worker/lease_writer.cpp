#include "prefill_worker/lease_writer.h"

#include "common/logging.h"

namespace dq::prefill {
namespace v1 = dqserve::v1;

absl::StatusOr<std::unique_ptr<LeaseWriter>> LeaseWriter::Create(KvSender& sender, LeasePlan plan,
                                                                 const v1::StatePart& part,
                                                                 int io_timeout_ms) {
  std::unique_ptr<LeaseWriter> w(
      new LeaseWriter(sender, std::move(plan), part.endpoint().address(), io_timeout_ms));
  for (const v1::KvRemoteRegion& r : part.endpoint().regions()) {
    auto id = sender.transport->Prepare(r.region_descriptor());
    if (!id.ok()) {
      const absl::StatusCode code = absl::IsInvalidArgument(id.status())
                                        ? absl::StatusCode::kInvalidArgument
                                        : absl::StatusCode::kUnavailable;
      return absl::Status(
          code, absl::StrCat("cannot reach the decode worker's KV endpoint ", w->peer_, " (",
                             std::string(sender.transport->name()), "): ", id.status().message()));
    }
    w->remotes_.push_back(*id);
  }
  return w;
}

LeaseWriter::~LeaseWriter() {
  for (kvtransfer::RemoteRegionId id : remotes_) {
    absl::Status s = sender_.transport->ReleaseRemote(id);
    if (!s.ok()) spdlog::warn("releasing a remote KV region: {}", s.ToString());
  }
}

void LeaseWriter::Fail(const absl::Status& s) {
  if (!error_.ok()) return;
  error_ = absl::UnavailableError(
      absl::StrCat("KV transfer to the decode worker at ", peer_, " failed: ", s.ToString()));
}

void LeaseWriter::PostLayer(int layer, int first, int last, std::span<const int32_t> local_blocks) {
  if (!error_.ok() || first >= last) return;
  for (v1::KvTensor tensor : {v1::KV_TENSOR_KEY, v1::KV_TENSOR_VALUE}) {
    const kvtransfer::RegionId local = tensor == v1::KV_TENSOR_KEY ? sender_.keys : sender_.values;
    for (const RegionCopies& group : plan_.Copies(tensor, layer, first, last, local_blocks)) {
      if (first_post_ == Clock::time_point{}) first_post_ = Clock::now();
      auto id = sender_.transport->Post(local, remotes_[group.region], group.copies);
      if (!id.ok()) {
        Fail(id.status());
        return;
      }
      pending_.push_back(*id);
      for (const kvtransfer::CopyOp& op : group.copies) bytes_ += op.bytes;
    }
  }
}

absl::Status LeaseWriter::Wait() {
  // Every transfer must end (done or failed) before its source blocks are rewritten or freed,
  // so keep waiting after a failure; each wait is bounded by the transport's io timeout.
  for (kvtransfer::TransferId id : pending_) {
    absl::Status s = kvtransfer::WaitForTransfer(*sender_.transport, id, 2 * io_timeout_ms_);
    if (!s.ok()) Fail(s);
  }
  pending_.clear();
  last_done_ = Clock::now();
  return error_;
}

double LeaseWriter::transfer_ms() const {
  if (first_post_ == Clock::time_point{} || last_done_ < first_post_) return 0;
  return std::chrono::duration<double, std::milli>(last_done_ - first_post_).count();
}

}  // namespace dq::prefill
