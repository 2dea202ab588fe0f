// The wire contracts compile, link (with the gRPC stubs) and survive a serialization round trip.
#include <gtest/gtest.h>

#include "dqserve/v1/generate.grpc.pb.h"
#include "dqserve/v1/generate.pb.h"
#include "dqserve/v1/worker.grpc.pb.h"
#include "dqserve/v1/worker.pb.h"

namespace dqserve::v1 {
namespace {

template <typename Message>
Message RoundTrip(const Message& in) {
  std::string bytes;
  EXPECT_TRUE(in.SerializeToString(&bytes));
  Message out;
  EXPECT_TRUE(out.ParseFromString(bytes));
  return out;
}

TEST(ProtoTest, GenerateRequestRoundTrips) {
  GenerateRequest req;
  req.set_request_id("req-1");
  auto* chat = req.mutable_chat();
  chat->set_add_generation_prompt(true);
  auto* msg = chat->add_messages();
  msg->set_role("user");
  msg->set_content("Why is the sky blue?");
  auto* s = req.mutable_sampling();
  s->set_temperature(0.7f);
  s->set_top_p(0.9f);
  s->set_top_k(40);
  s->set_seed(1234);
  s->set_max_tokens(64);
  s->add_stop("\n\n");
  s->add_stop_token_ids(151645);
  s->set_logprobs(true);
  s->set_top_logprobs(5);
  req.set_deadline_unix_ms(1'700'000'000'000);

  GenerateRequest out = RoundTrip(req);
  EXPECT_EQ(out.request_id(), "req-1");
  ASSERT_EQ(out.input_case(), GenerateRequest::kChat);
  EXPECT_EQ(out.chat().messages(0).content(), "Why is the sky blue?");
  EXPECT_TRUE(out.sampling().has_temperature());
  EXPECT_FLOAT_EQ(out.sampling().temperature(), 0.7f);
  EXPECT_FALSE(out.sampling().has_min_p());  // unset optional stays unset: server default
  EXPECT_EQ(out.sampling().stop(0), "\n\n");
  EXPECT_EQ(out.sampling().stop_token_ids(0), 151645);
  EXPECT_EQ(out.deadline_unix_ms(), 1'700'000'000'000);
}

TEST(ProtoTest, FinalGenerateResponseRoundTrips) {
  GenerateResponse resp;
  resp.set_request_id("req-1");
  resp.set_text_delta("Rayleigh");
  resp.add_token_ids(42);
  auto* lp = resp.add_logprobs();
  lp->mutable_chosen()->set_token_id(42);
  lp->mutable_chosen()->set_logprob(-0.25f);
  resp.set_finished(true);
  resp.set_finish_reason(FINISH_REASON_STOP);
  resp.set_stop_string("\n\n");
  resp.mutable_usage()->set_prompt_tokens(12);
  resp.mutable_usage()->set_completion_tokens(3);

  GenerateResponse out = RoundTrip(resp);
  EXPECT_EQ(out.finish_reason(), FINISH_REASON_STOP);
  EXPECT_EQ(out.matched_stop_case(), GenerateResponse::kStopString);
  EXPECT_FLOAT_EQ(out.logprobs(0).chosen().logprob(), -0.25f);
  EXPECT_EQ(out.usage().completion_tokens(), 3u);
}

TEST(ProtoTest, KvLeaseAndCommitRoundTrip) {
  KvLease lease;
  lease.set_lease_id("lease-7");
  lease.set_request_id("req-1");
  lease.set_ttl_ms(5000);
  StatePart* part = lease.add_parts();
  part->set_role(STATE_PART_ROLE_TARGET);
  part->set_kind(STATE_PART_KIND_PAGED_KV);
  part->set_required(true);
  part->set_cached_tokens(64);
  auto* run = part->add_blocks();
  run->set_start_block(128);
  run->set_count(32);
  auto* ep = part->mutable_endpoint();
  ep->set_transport("tcp");
  ep->set_address("127.0.0.1:41234");
  auto* region = ep->add_regions();
  region->set_tensor(KV_TENSOR_KEY);
  region->set_num_layers(36);
  region->set_layer_stride_bytes(uint64_t{1} << 33);  // > 4 GiB survives as uint64
  region->set_region_descriptor(
      std::string("DQKV\x01\x00\xff", 7));  // arbitrary bytes, NULs included
  auto* layout = part->mutable_kv_layout();
  layout->set_architecture("Qwen3ForCausalLM");
  layout->set_num_layers(36);
  layout->set_num_kv_heads(8);
  layout->set_head_dim(128);
  layout->set_kv_dtype("bf16");
  layout->set_block_size(16);

  KvLease out = RoundTrip(lease);
  ASSERT_EQ(out.parts_size(), 1);
  const StatePart& got = out.parts(0);
  EXPECT_EQ(got.role(), STATE_PART_ROLE_TARGET);
  EXPECT_TRUE(got.required());
  EXPECT_EQ(got.cached_tokens(), 64u);
  EXPECT_EQ(got.blocks(0).start_block(), 128u);
  EXPECT_EQ(got.endpoint().regions(0).layer_stride_bytes(), uint64_t{1} << 33);
  EXPECT_EQ(got.endpoint().regions(0).region_descriptor(), std::string("DQKV\x01\x00\xff", 7));
  EXPECT_EQ(got.kv_layout().head_dim(), 128u);

  DecodeRequest decode;
  decode.mutable_commit()->set_lease_id("lease-7");
  decode.mutable_commit()->set_num_tokens(500);
  decode.mutable_commit()->set_first_token(9707);
  StatePartCommit* skipped = decode.mutable_commit()->add_parts();
  skipped->set_role(STATE_PART_ROLE_DRAFTER);
  skipped->set_skipped("no drafter");
  DecodeRequest decode_out = RoundTrip(decode);
  EXPECT_EQ(decode_out.commit().parts(0).role(), STATE_PART_ROLE_DRAFTER);
  EXPECT_FALSE(decode_out.commit().parts(0).written());
  EXPECT_EQ(decode_out.commit().parts(0).skipped(), "no drafter");
  EXPECT_EQ(decode_out.commit().first_token(), 9707);
  EXPECT_EQ(decode_out.commit().num_tokens(), 500u);
}

TEST(ProtoTest, HandshakeCarriesCheckpointIdentity) {
  HandshakeResponse resp;
  auto* w = resp.mutable_worker();
  w->set_role("decode");
  w->add_transports("ucx");
  w->add_transports("tcp");
  w->mutable_checkpoint()->set_format("gguf");
  w->mutable_checkpoint()->set_scheme("gguf:IQ2_XXS");
  w->mutable_checkpoint()->set_size_bytes(1'234'567'890);
  resp.set_kv_layout_compatible(true);
  HandshakeResponse out = RoundTrip(resp);
  EXPECT_EQ(out.worker().transports_size(), 2);
  EXPECT_EQ(out.worker().checkpoint().scheme(), "gguf:IQ2_XXS");
}

TEST(ProtoTest, ServiceStubsExist) {
  // The services' method tables are generated; a typo in the .proto would not compile here.
  EXPECT_STREQ(DqServe::service_full_name(), "dqserve.v1.DqServe");
  EXPECT_STREQ(PrefillWorker::service_full_name(), "dqserve.v1.PrefillWorker");
  EXPECT_STREQ(DecodeWorker::service_full_name(), "dqserve.v1.DecodeWorker");
}

}  // namespace
}  // namespace dqserve::v1
