// worker_common: the KV layout check, handshake answers, sampling conversion and phase loading.
#include <gtest/gtest.h>

#include "tests/unit/engine/tiny_model.h"
#include "worker_common/phase_model.h"
#include "worker_common/proto_convert.h"
#include "worker_common/worker_identity.h"

namespace dq::worker {
namespace {
namespace v1 = dqserve::v1;

v1::KvLayout Layout() {
  v1::KvLayout l;
  l.set_architecture("qwen3");
  l.set_num_layers(36);
  l.set_num_kv_heads(8);
  l.set_head_dim(128);
  l.set_kv_dtype("f32");
  l.set_block_size(16);
  return l;
}

TEST(KvLayoutMismatch, EqualLayoutsAgree) { EXPECT_EQ(KvLayoutMismatch(Layout(), Layout()), ""); }

TEST(KvLayoutMismatch, NamesEachDifferingFieldWithBothValues) {
  struct Case {
    void (*change)(v1::KvLayout&);
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](v1::KvLayout& l) { l.set_architecture("llama"); },
       "architecture: expected \"qwen3\", got \"llama\""},
      {[](v1::KvLayout& l) { l.set_num_layers(28); }, "num_layers: expected 36, got 28"},
      {[](v1::KvLayout& l) { l.set_num_kv_heads(4); }, "num_kv_heads: expected 8, got 4"},
      {[](v1::KvLayout& l) { l.set_head_dim(64); }, "head_dim: expected 128, got 64"},
      {[](v1::KvLayout& l) { l.set_kv_dtype("bf16"); }, "kv_dtype: expected \"f32\", got \"bf16\""},
      {[](v1::KvLayout& l) { l.set_block_size(32); }, "block_size: expected 16, got 32"},
  };
  for (const Case& c : cases) {
    v1::KvLayout other = Layout();
    c.change(other);
    const std::string m = KvLayoutMismatch(Layout(), other);
    EXPECT_NE(m.find(c.want), std::string::npos) << m;
    EXPECT_NE(m.find("same KV dtype and block size"), std::string::npos) << m;
  }
  v1::KvLayout two = Layout();
  two.set_num_layers(1);
  two.set_block_size(8);
  const std::string m = KvLayoutMismatch(Layout(), two);
  EXPECT_NE(m.find("num_layers"), std::string::npos) << m;
  EXPECT_NE(m.find("block_size"), std::string::npos) << m;
  EXPECT_EQ(m.find("head_dim"), std::string::npos) << m;
}

TEST(AnswerHandshake, CompatibleIncompatibleAndUnchecked) {
  v1::WorkerIdentity self;
  self.set_role("decode");
  *self.mutable_kv_layout() = Layout();
  v1::HandshakeRequest req;
  *req.mutable_expected_kv_layout() = Layout();
  v1::HandshakeResponse r = AnswerHandshake(self, req);
  EXPECT_TRUE(r.kv_layout_compatible());
  EXPECT_EQ(r.mismatch(), "");
  EXPECT_EQ(r.worker().role(), "decode");

  req.mutable_expected_kv_layout()->set_num_kv_heads(2);
  r = AnswerHandshake(self, req);
  EXPECT_FALSE(r.kv_layout_compatible());
  EXPECT_NE(r.mismatch().find("num_kv_heads: expected 2, got 8"), std::string::npos)
      << r.mismatch();

  r = AnswerHandshake(self, v1::HandshakeRequest());  // no expectation: just report
  EXPECT_TRUE(r.kv_layout_compatible());
}

TEST(SamplingFromProto, CopiesSetFieldsAndDefaultsMaxTokens) {
  v1::SamplingParams p;
  p.set_temperature(0.7f);
  p.set_top_k(40);
  p.set_seed(9);
  p.add_stop_token_ids(5);
  auto s = SamplingFromProto(p, 1000, 77);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FLOAT_EQ(s->temperature, 0.7f);
  EXPECT_EQ(s->top_k, 40);
  EXPECT_EQ(s->seed, 9u);
  EXPECT_EQ(s->max_tokens, 77);
  EXPECT_EQ(s->stop_token_ids, std::vector<int32_t>{5});
  EXPECT_FLOAT_EQ(s->top_p, 1.0f);  // unset keeps the engine default
  p.set_max_tokens(3);
  EXPECT_EQ(SamplingFromProto(p, 1000, 77)->max_tokens, 3);
}

TEST(SamplingFromProto, RejectsOutOfRangeValuesNamingTheField) {
  struct Case {
    void (*set)(v1::SamplingParams&);
    const char* field;
  };
  const std::vector<Case> cases = {
      {[](v1::SamplingParams& p) { p.set_temperature(-1); }, "temperature"},
      {[](v1::SamplingParams& p) { p.set_top_p(0); }, "top_p"},
      {[](v1::SamplingParams& p) { p.set_top_p(1.5f); }, "top_p"},
      {[](v1::SamplingParams& p) { p.set_min_p(2); }, "min_p"},
      {[](v1::SamplingParams& p) { p.set_presence_penalty(3); }, "presence_penalty"},
      {[](v1::SamplingParams& p) { p.set_frequency_penalty(-3); }, "frequency_penalty"},
      {[](v1::SamplingParams& p) { p.set_repetition_penalty(0); }, "repetition_penalty"},
      {[](v1::SamplingParams& p) { p.add_stop_token_ids(1000); }, "stop_token_ids"},
      {[](v1::SamplingParams& p) { p.set_top_logprobs(21); }, "top_logprobs"},
  };
  for (const Case& c : cases) {
    v1::SamplingParams p;
    c.set(p);
    auto s = SamplingFromProto(p, 1000, 16);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(s.status().message().find(c.field), std::string::npos) << s.status();
  }
}

TEST(PositionLogprobsOf, ChosenAndTopFromTheRawDistribution) {
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f};
  const v1::PositionLogprobs p = PositionLogprobsOf(logits, 2, 2);
  const float lse = std::log(std::exp(0.0f) + std::exp(2.0f) + std::exp(1.0f));
  EXPECT_EQ(p.chosen().token_id(), 2);
  EXPECT_NEAR(p.chosen().logprob(), 1.0f - lse, 1e-5);
  ASSERT_EQ(p.top_size(), 2);
  EXPECT_EQ(p.top(0).token_id(), 1);
  EXPECT_EQ(p.top(1).token_id(), 2);
  EXPECT_EQ(PositionLogprobsOf(logits, 0, 0).top_size(), 0);
}

TEST(LoadPhaseModel, TinyModelReportsSchemeAndLayout) {
  PhaseModelOptions o;
  o.model = dq::testing::TinyQwen3Path();
  o.threads = 1;
  o.kv_capacity_tokens = 256;
  auto pm = LoadPhaseModel(o);
  ASSERT_TRUE(pm.ok()) << pm.status();
  EXPECT_EQ((*pm)->scheme, "bf16:weight_only");
  const v1::KvLayout l = KvLayoutOf(**pm);
  EXPECT_EQ(l.num_layers(), 2u);
  EXPECT_EQ(l.num_kv_heads(), 2u);
  EXPECT_EQ(l.head_dim(), 32u);
  EXPECT_EQ(l.kv_dtype(), "f32");
  EXPECT_EQ(l.block_size(), 16u);
  const v1::WorkerIdentity id = WorkerIdentityOf(**pm, {"prefill", "127.0.0.1:1", {"tcp"}});
  EXPECT_EQ(id.checkpoint().scheme(), "bf16:weight_only");
  EXPECT_EQ(id.checkpoint().format(), "safetensors");
  EXPECT_GT(id.checkpoint().size_bytes(), 0u);
  EXPECT_EQ(id.version(), VersionString());

  o.compute = "w4a4";  // needs nvfp4 weights; these are bf16
  auto w4 = LoadPhaseModel(o);
  EXPECT_FALSE(w4.ok());
  EXPECT_NE(w4.status().message().find("nvfp4"), std::string::npos) << w4.status();

  o.compute = "fp3";
  EXPECT_FALSE(LoadPhaseModel(o).ok());
  o.compute = "weight_only";
  o.model = "/no/such/model";
  auto missing = LoadPhaseModel(o);
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/no/such/model"), std::string::npos);
}

}  // namespace
}  // namespace dq::worker
