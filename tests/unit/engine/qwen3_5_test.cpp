// Qwen3.5's architecture file: what it reads from config.json, the hybrid program it binds (GDN
// and gated attention blocks, the state slot they declare), per-sequence state slots in the KV
// pool, and that a prompt fed whole (chunked GDN), in pieces (chunked with a carried state) and
// token by token (recurrent steps) gives the same logits. Numerics against transformers are in
// model_golden_test (TinyQwen3_5).
#include <gtest/gtest.h>

#include <cmath>

#include "engine/model/architecture.h"
#include "engine/model/model_config.h"
#include "engine/model/model_runner.h"
#include "tests/unit/engine/tiny_model.h"

namespace dq {
namespace {

nlohmann::json BaseConfig() {
  return {{"model_type", "qwen3_5_text"},
          {"vocab_size", 256},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_hidden_layers", 8},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 32},
          {"max_position_embeddings", 512},
          {"linear_num_key_heads", 2},
          {"linear_num_value_heads", 4},
          {"linear_key_head_dim", 16},
          {"linear_value_head_dim", 8},
          {"linear_conv_kernel_dim", 4}};
}

TEST(Qwen3_5ConfigTest, ReadsIntervalRopeAndLinearAttentionShape) {
  auto c = ModelConfigFromHfJson(BaseConfig());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "qwen3_5");
  // full_attention_interval defaults to 4; partial_rotary_factor to 0.25.
  EXPECT_EQ(c->linear_layers,
            (std::vector<bool>{true, true, true, false, true, true, true, false}));
  EXPECT_EQ(c->rotary_dim, 8);
  EXPECT_TRUE(c->attn_output_gate);
  EXPECT_EQ(c->q_proj_dim(), 2 * 4 * 32);
  EXPECT_EQ(c->gdn_conv_dim(), 2 * 2 * 16 + 4 * 8);
  EXPECT_FALSE(c->llama_layer());

  nlohmann::json j = BaseConfig();
  j["layer_types"] = {"full_attention",   "linear_attention", "full_attention",
                      "linear_attention", "linear_attention", "linear_attention",
                      "linear_attention", "full_attention"};
  j["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", 1e6}, {"partial_rotary_factor", 0.5}};
  c = ModelConfigFromHfJson(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->linear_layers,
            (std::vector<bool>{false, true, false, true, true, true, true, false}));
  EXPECT_EQ(c->rotary_dim, 16);
  EXPECT_FLOAT_EQ(c->rope_theta, 1e6f);
}

TEST(Qwen3_5ConfigTest, RefusesWhatItDoesNotCompute) {
  nlohmann::json heads = BaseConfig();
  heads["linear_num_value_heads"] = 3;  // not a multiple of the 2 key heads
  EXPECT_EQ(ModelConfigFromHfJson(heads).status().code(), absl::StatusCode::kInvalidArgument);
  nlohmann::json yarn = BaseConfig();
  yarn["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_EQ(ModelConfigFromHfJson(yarn).status().code(), absl::StatusCode::kUnimplemented);
  nlohmann::json types = BaseConfig();
  types["layer_types"] = {"full_attention"};
  EXPECT_EQ(ModelConfigFromHfJson(types).status().code(), absl::StatusCode::kInvalidArgument);
  nlohmann::json act = BaseConfig();
  act["hidden_act"] = "gelu";
  EXPECT_EQ(ModelConfigFromHfJson(act).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(StateSlotPoolTest, SlotsComeZeroedAndGoBack) {
  KvCacheOptions o{.num_layers = 1,
                   .num_kv_heads = 1,
                   .head_dim = 2,
                   .block_size = 4,
                   .num_blocks = 8,
                   .host_storage = true,
                   .state_slot_floats = 5,
                   .num_state_slots = 2};
  KvBlockPool pool(o);
  ASSERT_TRUE(pool.has_state_slots());
  KvSequence a, b, c;
  pool.extend(a, 3);
  pool.extend(b, 3);
  ASSERT_GE(a.state_slot, 0);
  ASSERT_GE(b.state_slot, 0);
  EXPECT_NE(a.state_slot, b.state_slot);
  EXPECT_EQ(pool.num_free_sequences(), 0);
  EXPECT_FALSE(pool.can_extend(c, 1));  // blocks are free, slots are not
  std::fill_n(pool.state_slots().slot(a.state_slot), 5, 7.0f);
  pool.extend(a, 9);  // more blocks, the same slot
  EXPECT_EQ(pool.state_slots().slot(a.state_slot)[4], 7.0f);
  const int32_t slot = a.state_slot;
  pool.release(a);
  EXPECT_EQ(a.state_slot, -1);
  EXPECT_TRUE(pool.can_extend(c, 1));
  pool.extend(c, 1);
  EXPECT_EQ(c.state_slot, slot);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(pool.state_slots().slot(slot)[i], 0.0f) << i;
  // Without slots (a pure-attention model) nothing changes.
  KvBlockPool plain({.num_layers = 1, .num_kv_heads = 1, .head_dim = 2, .num_blocks = 2});
  KvSequence p;
  plain.extend(p, 3);
  EXPECT_EQ(p.state_slot, -1);
}

class TinyQwen3_5Test : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = LoadModel(testing::TinyQwen3_5Path());
    ASSERT_TRUE(m.ok()) << m.status() << " (run through ctest: its fixture makes the model)";
    model_ = std::move(*m);
  }
  std::unique_ptr<Model> model_;
};

TEST_F(TinyQwen3_5Test, BindsHybridLayersAndDeclaresTheirState) {
  auto p = BindModelProgram(*model_->checkpoint, model_->config);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->layers.size(), 8u);
  int64_t offset = 0;
  for (size_t i = 0; i < p->layers.size(); ++i) {
    const auto* g = FindBlock<GatedDeltaBlock>(p->layers[i]);
    const auto* a = FindBlock<AttentionBlock>(p->layers[i]);
    EXPECT_NE(FindBlock<MlpBlock>(p->layers[i]), nullptr);
    if ((i + 1) % 4 == 0) {
      ASSERT_NE(a, nullptr) << i;
      EXPECT_EQ(g, nullptr);
      EXPECT_TRUE(a->output_gate);
      EXPECT_EQ(a->rotary_dim, 8);
      EXPECT_EQ(a->q.out_features, 2 * 4 * 32);
    } else {
      ASSERT_NE(g, nullptr) << i;
      EXPECT_EQ(g->state_offset, offset);
      EXPECT_EQ(g->conv_state_floats(), (2 * 2 * 16 + 4 * 16) * 3);
      EXPECT_EQ(g->delta_state_floats(), 4 * 16 * 16);
      offset += g->state_floats();
      // The zero-centred input norm is bound as 1 + w, the gated norm as w (both near 1).
      double mean = 0;
      for (float w : g->norm) mean += w / g->norm.size();
      EXPECT_NEAR(mean, 1.0, 0.1);
    }
  }
  const SequenceStateSpec s = p->state();
  EXPECT_EQ(s.kv_layers, 2);
  EXPECT_EQ(s.recurrent_layers, 6);
  EXPECT_EQ(s.slot_floats, offset);
  const absl::Status cuda = p->RequireLlamaBlocks("CUDA");
  EXPECT_EQ(cuda.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(cuda.message().find("Gated DeltaNet"), std::string::npos) << cuda;
}

// Last-position logits of `ids` fed in pieces of `piece` tokens (the rest one token at a time
// from `steps_from` on), on a fresh sequence.
std::vector<float> LastLogits(ModelRunner& r, const std::vector<int32_t>& ids, int piece,
                              int steps_from) {
  KvSequence seq;
  r.kv_pool().extend(seq, static_cast<int>(ids.size()));
  BatchLogits logits;
  for (int start = 0; start < static_cast<int>(ids.size());) {
    const int n = start >= steps_from ? 1 : std::min<int>(piece, ids.size() - start);
    Batch b{start == 0 ? Phase::kPrefill : Phase::kDecode,
            {{&seq, std::span<const int32_t>(ids).subspan(start, n), false}}};
    EXPECT_TRUE(r.Forward(b, &logits).ok());
    start += n;
  }
  r.kv_pool().release(seq);
  return std::vector<float>(logits.row(0), logits.row(0) + logits.vocab);
}

TEST_F(TinyQwen3_5Test, ChunkedPrefillEqualsPiecesAndRecurrentSteps) {
  ModelRunnerOptions o;
  o.kv_capacity = 1024;
  o.state_slots = 2;
  auto runner = ModelRunner::Create(*model_->checkpoint, model_->config, o);
  ASSERT_TRUE(runner.ok()) << runner.status();
  std::vector<int32_t> ids;
  for (int i = 0; i < 150; ++i) ids.push_back((i * 7919 + 13) % 5000 + 100);  // crosses 2 chunks
  const std::vector<float> whole = LastLogits(**runner, ids, 150, 150);
  const std::vector<float> pieces = LastLogits(**runner, ids, 37, 150);
  const std::vector<float> steps = LastLogits(**runner, ids, 70, 70);  // then 80 decode steps
  float d_pieces = 0, d_steps = 0, spread = 0;
  for (size_t v = 0; v < whole.size(); ++v) {
    d_pieces = std::max(d_pieces, std::abs(whole[v] - pieces[v]));
    d_steps = std::max(d_steps, std::abs(whole[v] - steps[v]));
    spread = std::max(spread, std::abs(whole[v]));
  }
  std::cout << "max |dlogit| pieces " << d_pieces << ", steps " << d_steps << " (max |logit| "
            << spread << ")\n";
  EXPECT_GT(spread, 0.5f);
  EXPECT_LE(d_pieces, 1e-4f);
  EXPECT_LE(d_steps, 1e-4f);
  // Two sequences in one batch keep their own states: the same as each alone.
  KvSequence a, b;
  (*runner)->kv_pool().extend(a, 20);
  (*runner)->kv_pool().extend(b, 20);
  EXPECT_FALSE((*runner)->kv_pool().can_extend(KvSequence{}, 1));  // both slots taken
  const std::vector<int32_t> pa(ids.begin(), ids.begin() + 20),
      pb(ids.begin() + 20, ids.end() - 110);
  BatchLogits both;
  Batch batch{Phase::kPrefill, {{&a, pa, false}, {&b, pb, false}}};
  ASSERT_TRUE((*runner)->Forward(batch, &both).ok());
  (*runner)->kv_pool().release(a);
  (*runner)->kv_pool().release(b);
  const std::vector<float> alone = LastLogits(**runner, pb, 64, 64);
  float d = 0;
  for (size_t v = 0; v < alone.size(); ++v)
    d = std::max(d, std::abs(both.last(1, batch)[v] - alone[v]));
  EXPECT_LE(d, 1e-5f);
}

TEST_F(TinyQwen3_5Test, ASequenceWithoutAStateSlotIsRefused) {
  ModelRunnerOptions o;
  o.kv_capacity = 256;
  auto runner = ModelRunner::Create(*model_->checkpoint, model_->config, o);
  ASSERT_TRUE(runner.ok()) << runner.status();
  KvSequence seq;
  seq.blocks = (*runner)->kv_pool().allocate(1);  // blocks, but no slot
  const std::vector<int32_t> ids = {5, 6, 7};
  BatchLogits logits;
  const absl::Status s = (*runner)->Forward({Phase::kPrefill, {{&seq, ids, false}}}, &logits);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  (*runner)->kv_pool().release(seq);
}

}  // namespace
}  // namespace dq
