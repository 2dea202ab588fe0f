#include "router/decode_lease.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "spdlog/spdlog.h"

namespace dq::router {
namespace v1 = dqserve::v1;

namespace {

void SendRelease(v1::DecodeWorker::StubInterface* worker, v1::ReleaseRequest request,
                 std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::ReleaseResponse response;
  const grpc::Status s = worker->Release(&ctx, request, &response);
  if (!s.ok()) {
    // The lease's ttl reclaims it anyway; this only frees the blocks sooner.
    spdlog::warn("Release of lease '{}' (request {}) failed: {}", request.lease_id(),
                 request.request_id(), s.error_message());
  }
}

}  // namespace

DecodeLease::~DecodeLease() { End("the request ended before decoding"); }

void DecodeLease::Reserved(v1::DecodeWorker::StubInterface* worker, v1::KvLease lease) {
  worker_ = worker;
  lease_ = std::move(lease);
  holder_ = Holder::kRouter;
}

void DecodeLease::ReleaseUnknown(v1::DecodeWorker::StubInterface* worker,
                                 const std::string& request_id, const std::string& reason,
                                 std::chrono::milliseconds timeout) {
  v1::ReleaseRequest request;
  request.set_request_id(request_id);
  request.set_reason(reason);
  SendRelease(worker, std::move(request), timeout);
}

void DecodeLease::HandedToDecode() {
  if (holder_ == Holder::kRouter) holder_ = Holder::kInDoubt;
}

void DecodeLease::TakenByWorker() {
  if (holder_ == Holder::kInDoubt) holder_ = Holder::kDecodeWorker;
}

void DecodeLease::End(const std::string& reason) {
  if (holder_ != Holder::kRouter && holder_ != Holder::kInDoubt) return;
  holder_ = Holder::kNone;
  v1::ReleaseRequest request;
  request.set_lease_id(lease_.lease_id());
  request.set_reason(reason);
  SendRelease(worker_, std::move(request), release_timeout_);
}

}  // namespace dq::router
