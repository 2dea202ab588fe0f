// Shared by the prefill worker tests: a real dq-prefill service on loopback (in process), the
// decode side played by a real tcp Transport over a KvBlockPool the test owns, and a local
// one-shot prefill of the same model to compare against.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dqserve/v1/worker.grpc.pb.h"
#include "engine/kvcache/kv_block_pool.h"
#include "engine/model/model_runner.h"
#include "kvtransfer/transport.h"
#include "prefill_worker/prefill_server.h"
#include "tests/unit/engine/tiny_model.h"
#include "worker_common/kv_staging.h"
#include "worker_common/lease_parts.h"
#include "worker_common/phase_model.h"
#include "worker_common/worker_identity.h"

namespace dq::prefill::testing {

namespace v1 = dqserve::v1;

inline std::unique_ptr<worker::PhaseModel> LoadTiny(int kv_capacity = 4096) {
  worker::PhaseModelOptions o;
  o.model = dq::testing::TinyQwen3Path();
  o.threads = 2;
  o.kv_capacity_tokens = kv_capacity;
  auto pm = worker::LoadPhaseModel(o);
  EXPECT_TRUE(pm.ok()) << pm.status() << " (run through ctest, which makes the tiny model)";
  return pm.ok() ? std::move(*pm) : nullptr;
}

// The decode worker's side of a lease: its own KV pool, a receiving tcp transport, and each
// lease's block runs registered as their own regions, one per layer and tensor (as the proto
// describes), so a write outside them is refused by the receiver.
class DecodeSide {
 public:
  DecodeSide(const KvCacheOptions& kv, v1::KvLayout layout, const std::string& kind = "tcp")
      : pool_(kv), layout_(layout), kind_(kind) {
    kvtransfer::TransportConfig c;
    c.kind = kind;
    c.io_timeout_ms = 2000;
    auto t = kvtransfer::CreateTransport(c);
    EXPECT_TRUE(t.ok()) << t.status();
    if (t.ok()) transport_ = std::move(*t);
    // Garbage everywhere, so that a block the sender missed can never compare equal by luck.
    for (int64_t i = 0; i < static_cast<int64_t>(pool_.region_bytes() / sizeof(float)); ++i) {
      pool_.keys_data()[i] = 1e30f;
      pool_.values_data()[i] = -1e30f;
    }
  }
  ~DecodeSide() { Kill(); }

  // A lease over `runs` ({start, count}), registered now: its one (target) part.
  v1::KvLease Lease(const std::string& id, const std::vector<std::pair<int, int>>& runs) {
    v1::KvLease lease;
    lease.set_lease_id(id);
    lease.set_request_id("req-" + id);
    lease.set_ttl_ms(30000);
    v1::StatePart& part = *lease.add_parts();
    part.set_role(v1::STATE_PART_ROLE_TARGET);
    part.set_kind(v1::STATE_PART_KIND_PAGED_KV);
    part.set_required(true);
    *part.mutable_kv_layout() = layout_;
    part.mutable_endpoint()->set_transport(kind_);
    part.mutable_endpoint()->set_address(transport_->address());
    for (auto [start, count] : runs) {
      v1::BlockRun* r = part.add_blocks();
      r->set_start_block(start);
      r->set_count(count);
      for (int layer = 0; layer < pool_.options().num_layers; ++layer) {
        AddRegion(part, v1::KV_TENSOR_KEY, pool_.keys_data(), layer, start, count);
        AddRegion(part, v1::KV_TENSOR_VALUE, pool_.values_data(), layer, start, count);
      }
    }
    return lease;
  }

  // Forgets every registered region: later writes to them are refused.
  void ReleaseRegions() {
    for (kvtransfer::RegionId id : regions_) EXPECT_TRUE(transport_->ReleaseRegion(id).ok());
    regions_.clear();
  }
  // The decode worker dies: its listener and connections close.
  void Kill() {
    if (!transport_) return;
    ReleaseRegions();
    transport_.reset();
  }

  KvBlockPool& pool() { return pool_; }
  bool ok() const { return transport_ != nullptr; }

 private:
  void AddRegion(v1::StatePart& part, v1::KvTensor tensor, float* base, int layer, int start,
                 int count) {
    char* ptr = reinterpret_cast<char*>(base) + pool_.block_offset(layer, start);
    auto h = transport_->RegisterRegion(ptr, count * pool_.block_bytes());
    ASSERT_TRUE(h.ok()) << h.status();
    regions_.push_back(h->id);
    v1::KvRemoteRegion* r = part.mutable_endpoint()->add_regions();
    r->set_tensor(tensor);
    r->set_first_layer(layer);
    r->set_num_layers(1);
    r->set_layer_stride_bytes(pool_.layer_stride_bytes());
    r->set_block_bytes(pool_.block_bytes());
    r->set_region_descriptor(h->descriptor);
    r->set_first_block(start);
    r->set_num_blocks(count);
  }

  KvBlockPool pool_;
  v1::KvLayout layout_;
  std::string kind_;
  std::unique_ptr<kvtransfer::Transport> transport_;
  std::vector<kvtransfer::RegionId> regions_;
};

// The lease's target part, to edit in tests.
inline v1::StatePart& Target(v1::KvLease& lease) {
  return *worker::FindMutablePart(&lease, v1::STATE_PART_ROLE_TARGET);
}

// The lease's target remote block ids in token order (token t is in block t / block_size).
inline std::vector<int32_t> LeaseBlocks(const v1::KvLease& lease) {
  std::vector<int32_t> out;
  for (const v1::BlockRun& r : worker::FindPart(lease, v1::STATE_PART_ROLE_TARGET)->blocks()) {
    for (uint32_t i = 0; i < r.count(); ++i) out.push_back(r.start_block() + i);
  }
  return out;
}

// A one-shot prefill of `prompt` on a runner of its own: the reference bytes and logits.
struct LocalPrefill {
  std::unique_ptr<worker::PhaseModel> model = LoadTiny();
  KvSequence kv;
  BatchLogits logits;
  Batch batch;

  explicit LocalPrefill(const std::vector<int32_t>& prompt) {
    KvBlockPool& pool = model->runner->kv_pool();
    pool.extend(kv, static_cast<int>(prompt.size()));
    batch = Batch{Phase::kPrefill, {{&kv, prompt, true}}};
    absl::Status s = model->runner->Forward(batch, &logits);
    EXPECT_TRUE(s.ok()) << s;
  }
  const KvBlockPool& pool() const { return model->runner->kv_pool(); }
  std::span<const float> row(int position) const {
    return {logits.row(position), static_cast<size_t>(logits.vocab)};
  }
};

// How far the received K/V of every prompt token and layer is from the reference (max |diff|);
// -1 when `n` tokens do not fit the lease.
inline float MaxKvDiff(const KvBlockPool& got, const v1::KvLease& lease, const LocalPrefill& want,
                       int n) {
  const std::vector<int32_t> remote = LeaseBlocks(lease);
  const int bs = got.block_size();
  const int width = got.options().num_kv_heads * got.options().head_dim;
  if (static_cast<int>(remote.size()) * bs < n) return -1;
  float worst = 0;
  for (int layer = 0; layer < got.options().num_layers; ++layer) {
    for (int t = 0; t < n; ++t) {
      const int32_t rb = remote[t / bs], lb = want.kv.blocks[t / bs];
      const float* gk = got.key(layer, rb, t % bs);
      const float* gv = got.value(layer, rb, t % bs);
      const float* wk = want.pool().key(layer, lb, t % bs);
      const float* wv = want.pool().value(layer, lb, t % bs);
      for (int i = 0; i < width; ++i) {
        worst = std::max({worst, std::abs(gk[i] - wk[i]), std::abs(gv[i] - wv[i])});
      }
    }
  }
  return worst;
}

// A running prefill worker and a client for it.
struct PrefillHarness {
  std::unique_ptr<PrefillServer> server;
  std::unique_ptr<v1::PrefillWorker::Stub> stub;

  // `staged`: the worker ships KV through its staging arena, as with a device cache (the CPU
  // pool stands in for the device, copied out with memcpy on the staging's thread); the kinds in
  // options.direct_for_tests read that "device" cache directly, as nccl does a GPU's.
  explicit PrefillHarness(const PrefillServerOptions& options, int kv_capacity = 4096,
                          bool staged = false) {
    auto model = LoadTiny(kv_capacity);
    if (!model) return;
    if (staged) {
      model->kv_staging = worker::CreateHostCopyKvStaging(model->runner->kv_pool(),
                                                          !options.direct_for_tests.empty());
    }
    auto s = PrefillServer::Start(std::move(model), options);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return;
    server = std::move(*s);
    stub = v1::PrefillWorker::NewStub(
        grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials()));
  }

  KvCacheOptions kv_options() const { return server->model().runner->kv_pool().options(); }
  v1::KvLayout layout() const { return worker::KvLayoutOf(server->model()); }

  grpc::Status Prefill(const v1::PrefillRequest& req, v1::PrefillResponse* resp,
                       int timeout_ms = 30000) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
    return stub->Prefill(&ctx, req, resp);
  }
  v1::WorkerHealthResponse Health() {
    grpc::ClientContext ctx;
    v1::WorkerHealthResponse h;
    EXPECT_TRUE(stub->Health(&ctx, {}, &h).ok());
    return h;
  }
};

inline v1::PrefillRequest Request(const std::vector<int32_t>& prompt, const v1::KvLease& lease) {
  v1::PrefillRequest r;
  r.set_request_id(lease.request_id());
  for (int32_t t : prompt) r.add_prompt_token_ids(t);
  r.mutable_sampling()->set_temperature(0);
  *r.mutable_lease() = lease;
  return r;
}

// A deterministic prompt of `n` token ids in the tiny model's vocabulary.
inline std::vector<int32_t> Prompt(int n, int salt = 0) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(3 + (i * 7919 + salt * 104729) % 40000);
  return p;
}

}  // namespace dq::prefill::testing
