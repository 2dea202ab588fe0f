// Who frees a request's KV lease on its decode worker: the one owner of that rule.
//
// A lease's blocks must go back to the decode worker's pool on every ending. Until the decode
// worker has committed the lease (it streams a Decode response only after committing), the
// router owns it and must release it; after that the worker frees the blocks itself when the
// sequence ends or its stream is cancelled. Between the two, a Decode call that was started and
// then cancelled or failed before any response leaves the lease in doubt: the worker may never
// have seen the call. The router then releases it too; the worker's Release frees uncommitted
// leases only, so a lease the worker did commit is never pulled from under its sequence.
#pragma once

#include <chrono>
#include <string>

#include "dqserve/v1/worker.grpc.pb.h"

namespace dq::router {

class DecodeLease {
 public:
  enum class Holder {
    kNone,          // nothing reserved, or released
    kRouter,        // reserved; Decode not called: the router releases it
    kInDoubt,       // Decode called, no response seen: released unless the worker responds
    kDecodeWorker,  // the worker responded, so it committed: it frees the blocks itself
  };

  DecodeLease(std::string request_id, std::chrono::milliseconds release_timeout)
      : request_id_(std::move(request_id)), release_timeout_(release_timeout) {}
  // Releases what the router still owns (a request that ended before decoding).
  ~DecodeLease();
  DecodeLease(const DecodeLease&) = delete;
  DecodeLease& operator=(const DecodeLease&) = delete;

  // The lease `worker` reserved for this request.
  void Reserved(dqserve::v1::DecodeWorker::StubInterface* worker, dqserve::v1::KvLease lease);
  // A Reserve call that failed on this side (deadline, cancel) may still have reserved blocks on
  // the worker: release whatever lease the request holds there, by request id.
  static void ReleaseUnknown(dqserve::v1::DecodeWorker::StubInterface* worker,
                             const std::string& request_id, const std::string& reason,
                             std::chrono::milliseconds timeout);
  // The Decode call carrying the commit is about to start.
  void HandedToDecode();
  // The Decode stream delivered a response.
  void TakenByWorker();
  // Ends the router's part: releases the lease unless the decode worker has taken it. Safe to
  // call in any state and more than once.
  void End(const std::string& reason);

  Holder holder() const { return holder_; }
  const dqserve::v1::KvLease& lease() const { return lease_; }

 private:
  const std::string request_id_;
  const std::chrono::milliseconds release_timeout_;
  dqserve::v1::DecodeWorker::StubInterface* worker_ = nullptr;
  dqserve::v1::KvLease lease_;
  Holder holder_ = Holder::kNone;
};

}  // namespace dq::router
