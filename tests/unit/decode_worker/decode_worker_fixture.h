// An in-process decode worker on a loopback port, and the test playing the prefill worker:
// a second ModelRunner prefills the prompt into its own pool and a real tcp Transport writes the
// blocks into the lease's regions, exactly as dq-prefill does.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "decode_worker/decode_server.h"
#include "dqserve/v1/worker.grpc.pb.h"
#include "engine/generate/generator.h"
#include "engine/sampler/sampler.h"
#include "kvtransfer/transport.h"
#include "tests/unit/engine/tiny_model.h"
#include "worker_common/kv_staging.h"
#include "worker_common/lease_parts.h"
#include "worker_common/proto_convert.h"

namespace dq::decode::testing {
namespace v1 = dqserve::v1;

// What one Decode stream delivered.
struct StreamResult {
  std::vector<int32_t> tokens;
  std::vector<v1::PositionLogprobs> logprobs;
  int responses = 0;
  bool finished = false;
  v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
  std::string error;
  grpc::Status status;
};

inline bool WaitUntil(const std::function<bool()>& done, int timeout_ms = 3000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

class DecodeWorkerTest : public ::testing::Test {
 protected:
  // Starts the worker; tests that need other options call it again after TearDownServer().
  // `staged`: the KV goes through per-lease staging buffers and lands at commit, as with a
  // device cache (the CPU pool stands in for the device, copied with memcpy).
  // `direct`: the regions are that cache's blocks, as with nccl on a GPU (tcp stands in).
  void StartServer(int max_batch = 2, int lease_ttl_ms = 30000,
                   const std::string& transport = "tcp", bool staged = false, bool direct = false) {
    worker::PhaseModelOptions mo;
    mo.model = dq::testing::TinyQwen3Path();
    mo.threads = 2;
    mo.kv_capacity_tokens = 2048;
    auto pm = worker::LoadPhaseModel(mo);
    ASSERT_TRUE(pm.ok()) << pm.status() << " (run through ctest: the fixture makes the model)";
    phase_ = std::move(*pm);
    if (staged) {
      phase_->kv_staging = worker::CreateHostCopyKvStaging(phase_->runner->kv_pool(), direct);
    }
    DecodeServerOptions so;
    so.max_batch = max_batch;
    so.lease_ttl_ms = lease_ttl_ms;
    so.reap_interval_ms = 20;
    so.transport = transport;
    so.direct_for_tests = direct;
    auto server = DecodeServer::Start(*phase_, so);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = v1::DecodeWorker::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
    free_at_start_ = server_->leases().stats().free_blocks;
  }

  void SetUp() override {
    model_ = dq::testing::LoadTinyQwen3();
    ASSERT_NE(model_, nullptr);
    ModelRunnerOptions ro;
    ro.threads = 2;
    ro.kv_capacity = 2048;
    auto runner = ModelRunner::Create(*model_->checkpoint, model_->config, ro);
    ASSERT_TRUE(runner.ok()) << runner.status();
    prefill_ = std::move(*runner);
    auto sender = kvtransfer::CreateTransport({});
    ASSERT_TRUE(sender.ok()) << sender.status();
    sender_ = std::move(*sender);
    StartServer();
  }

  void TearDown() override { TearDownServer(); }

  void TearDownServer() {
    if (server_) {
      // Every test must give every block back and leave no transfer region behind.
      EXPECT_TRUE(WaitUntil([&] {
        return server_->leases().stats().free_blocks == free_at_start_;
      })) << server_->leases().stats().free_blocks
          << " free, " << free_at_start_ << " at start";
      EXPECT_EQ(server_->regions().num_regions(), 0);
      server_->Shutdown(std::chrono::milliseconds(500));
      server_.reset();
    }
  }

  std::vector<int32_t> Prompt(const std::string& text) { return model_->tokenizer.Encode(text); }

  v1::SamplingParams Greedy(int max_tokens, bool ignore_eos = true) {
    v1::SamplingParams p;
    p.set_temperature(0);
    p.set_max_tokens(max_tokens);
    p.set_ignore_eos(ignore_eos);
    return p;
  }

  absl::StatusOr<v1::KvLease> Reserve(const std::string& id, size_t prompt_tokens, uint32_t max_new,
                                      int64_t deadline_unix_ms = 0) {
    v1::ReserveRequest r;
    r.set_request_id(id);
    r.set_num_tokens(static_cast<uint32_t>(prompt_tokens));
    r.set_max_new_tokens(max_new);
    r.add_transports("ucx");
    r.add_transports("tcp");
    r.set_deadline_unix_ms(deadline_unix_ms);
    grpc::ClientContext ctx;
    v1::KvLease lease;
    grpc::Status s = stub_->Reserve(&ctx, r, &lease);
    if (!s.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    }
    return lease;
  }

  // The prefill worker's part: prefill into our own pool, sample the first token greedily,
  // write the prompt's KV blocks into the lease's regions, and return the commit.
  v1::KvCommit Prefill(const v1::KvLease& lease, const std::vector<int32_t>& prompt,
                       const v1::SamplingParams& sampling) {
    KvBlockPool& pool = prefill_->kv_pool();
    KvSequence seq;
    pool.extend(seq, static_cast<int>(prompt.size()));
    Batch batch{Phase::kPrefill, {{&seq, prompt, false}}};
    BatchLogits logits;
    absl::Status st = prefill_->Forward(batch, &logits);
    EXPECT_TRUE(st.ok()) << st;
    const float* raw = logits.last(0, batch);
    std::vector<float> row(raw, raw + logits.vocab);
    auto params = worker::SamplingFromProto(sampling, logits.vocab, 1 << 20);
    EXPECT_TRUE(params.ok()) << params.status();
    Sampler sampler(*params);
    v1::KvCommit commit;
    commit.set_lease_id(lease.lease_id());
    commit.set_num_tokens(static_cast<uint32_t>(prompt.size()));
    commit.set_first_token(sampler.Sample(row));
    commit.set_sampler_draws(sampler.draws());
    if (sampling.logprobs()) {
      *commit.mutable_first_token_logprobs() = worker::PositionLogprobsOf(
          std::span<const float>(raw, logits.vocab), commit.first_token(),
          static_cast<int>(sampling.top_logprobs()));
    }
    ShipKv(lease, seq);
    pool.release(seq);
    return commit;
  }

  void ShipKv(const v1::KvLease& lease, const KvSequence& seq) {
    KvBlockPool& pool = prefill_->kv_pool();
    auto keys = sender_->RegisterRegion(pool.keys_data(), pool.region_bytes());
    auto values = sender_->RegisterRegion(pool.values_data(), pool.region_bytes());
    ASSERT_TRUE(keys.ok() && values.ok());
    const v1::StatePart& part = *worker::FindPart(lease, v1::STATE_PART_ROLE_TARGET);
    std::vector<int32_t> dst;  // the part's blocks in token order
    for (const auto& run : part.blocks()) {
      for (uint32_t i = 0; i < run.count(); ++i) dst.push_back(run.start_block() + i);
    }
    for (const v1::KvRemoteRegion& r : part.endpoint().regions()) {
      auto remote = sender_->Prepare(r.region_descriptor());
      ASSERT_TRUE(remote.ok()) << remote.status();
      std::vector<kvtransfer::CopyOp> copies;
      for (uint32_t b = r.first_block(); b < r.first_block() + r.num_blocks(); ++b) {
        const size_t index =
            std::find(dst.begin(), dst.end(), static_cast<int32_t>(b)) - dst.begin();
        ASSERT_LT(index, seq.blocks.size()) << "region covers a block past the prompt";
        copies.push_back({pool.block_offset(r.first_layer(), seq.blocks[index]),
                          (b - r.first_block()) * r.block_bytes(), r.block_bytes()});
      }
      const auto local = r.tensor() == v1::KV_TENSOR_KEY ? keys->id : values->id;
      auto id = sender_->Post(local, *remote, copies);
      ASSERT_TRUE(id.ok()) << id.status();
      absl::Status done = kvtransfer::WaitForTransfer(*sender_, *id, 5000);
      ASSERT_TRUE(done.ok()) << done;
      (void)sender_->ReleaseRemote(*remote);
    }
    (void)sender_->ReleaseRegion(keys->id);
    (void)sender_->ReleaseRegion(values->id);
  }

  // Reads a Decode stream to its end; `after_response(n)` returning true cancels the call.
  StreamResult Decode(const std::string& id, const v1::KvCommit& commit,
                      const v1::SamplingParams& sampling,
                      const std::function<bool(int)>& cancel_after = nullptr) {
    v1::DecodeRequest req;
    req.set_request_id(id);
    *req.mutable_commit() = commit;
    *req.mutable_sampling() = sampling;
    grpc::ClientContext ctx;
    auto reader = stub_->Decode(&ctx, req);
    StreamResult out;
    v1::DecodeResponse r;
    while (reader->Read(&r)) {
      ++out.responses;
      out.tokens.insert(out.tokens.end(), r.token_ids().begin(), r.token_ids().end());
      out.logprobs.insert(out.logprobs.end(), r.logprobs().begin(), r.logprobs().end());
      if (r.finished()) {
        out.finished = true;
        out.reason = r.finish_reason();
        out.error = r.error();
      }
      if (cancel_after && cancel_after(out.responses)) ctx.TryCancel();
    }
    out.status = reader->Finish();
    return out;
  }

  // The whole disaggregated path for one request.
  StreamResult Disaggregated(const std::string& id, const std::vector<int32_t>& prompt,
                             const v1::SamplingParams& sampling) {
    auto lease = Reserve(id, prompt.size(), sampling.max_tokens());
    EXPECT_TRUE(lease.ok()) << lease.status();
    if (!lease.ok()) return {};
    return Decode(id, Prefill(*lease, prompt, sampling), sampling);
  }

  // What `dqserve generate` produces for the same prompt and params (colocated).
  GenerationResult Colocated(const std::vector<int32_t>& prompt, const v1::SamplingParams& p) {
    auto params = worker::SamplingFromProto(p, model_->config.vocab_size, 1 << 20);
    EXPECT_TRUE(params.ok()) << params.status();
    Generator gen(*prefill_, model_->tokenizer, model_->config.eos_token_ids);
    GenerationRequest req{prompt, *params};
    auto r = gen.Generate(std::span(&req, 1));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? (*r)[0] : GenerationResult{};
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<ModelRunner> prefill_;
  std::unique_ptr<kvtransfer::Transport> sender_;
  std::unique_ptr<worker::PhaseModel> phase_;
  std::unique_ptr<DecodeServer> server_;
  std::unique_ptr<v1::DecodeWorker::Stub> stub_;
  int free_at_start_ = 0;
};

}  // namespace dq::decode::testing
