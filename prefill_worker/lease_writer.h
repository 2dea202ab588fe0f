// Writes one request's KV into one part of its decode lease (the target's or a drafter's):
// prepares the part's remote regions, posts a
// layer's blocks as soon as the forward pass has written them (from the per-layer hook, without
// waiting), and waits for every posted transfer afterwards. The first failure sticks: later
// posts are skipped and Finish reports it.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "dqserve/v1/worker.pb.h"
#include "prefill_worker/kv_senders.h"
#include "prefill_worker/lease_plan.h"

namespace dq::prefill {

class LeaseWriter {
 public:
  // Prepares every region of the part on `sender`'s transport (connecting to the decode worker).
  // Errors: Unavailable (peer unreachable), InvalidArgument (malformed descriptor).
  static absl::StatusOr<std::unique_ptr<LeaseWriter>> Create(KvSender& sender, LeasePlan plan,
                                                             const dqserve::v1::StatePart& part,
                                                             int io_timeout_ms);
  // Forgets the prepared regions. Precondition: Wait() was called after the last Post.
  ~LeaseWriter();
  LeaseWriter(const LeaseWriter&) = delete;
  LeaseWriter& operator=(const LeaseWriter&) = delete;

  // Queues prompt blocks [first, last) of `layer`, K and V, read from `local_blocks` (the local
  // block table, indexed by prompt block). Never blocks on the network.
  void PostLayer(int layer, int first, int last, std::span<const int32_t> local_blocks);
  // Waits until every posted transfer is done or failed; returns the first error of any Post or
  // transfer so far (Unavailable naming the decode worker), OK otherwise.
  absl::Status Wait();
  // Records a failure before any Post (e.g. copying the KV out of the device); like a transfer
  // failure, it sticks and skips later posts.
  void Fail(const absl::Status& s);

  const absl::Status& error() const { return error_; }
  // Whether its transport reads the device cache itself (KvSender::direct).
  bool direct() const { return sender_.direct; }
  uint64_t bytes_posted() const { return bytes_; }
  // From the first Post to the last transfer found done, in milliseconds.
  double transfer_ms() const;

 private:
  LeaseWriter(KvSender& sender, LeasePlan plan, std::string peer, int io_timeout_ms)
      : sender_(sender),
        plan_(std::move(plan)),
        peer_(std::move(peer)),
        io_timeout_ms_(io_timeout_ms) {}

  using Clock = std::chrono::steady_clock;
  KvSender& sender_;
  const LeasePlan plan_;
  const std::string peer_;  // the decode worker's transport address, for errors
  const int io_timeout_ms_;
  std::vector<kvtransfer::RemoteRegionId> remotes_;  // by the part's region index
  std::vector<kvtransfer::TransferId> pending_;
  absl::Status error_;
  uint64_t bytes_ = 0;
  Clock::time_point first_post_{};
  Clock::time_point last_done_{};
};

}  // namespace dq::prefill
