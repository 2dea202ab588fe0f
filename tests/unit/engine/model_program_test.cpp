// The model program (engine/model/model_program.h) and the architecture registry: each
// architecture is found by its names and binds its declared blocks; the CPU backend executes
// whatever block list a program declares (a block added to a layer runs, in order); taps hand
// out only the layers asked for; the KV cache is sized by the program's attention blocks.
#include "engine/model/model_program.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/thread_pool.h"
#include "engine/model/architecture.h"
#include "engine/model/decoder_model.h"
#include "engine/model/model_runner.h"
#include "tests/unit/engine/tiny_model.h"

namespace dq {
namespace {

TEST(ArchitectureRegistry, FindsEachArchitectureByItsNames) {
  for (const char* name : {"llama", "LlamaForCausalLM"}) {
    ASSERT_NE(FindArchitecture(name), nullptr) << name;
    EXPECT_EQ(FindArchitecture(name)->name, "llama");
  }
  for (const char* name : {"qwen3", "Qwen3ForCausalLM"}) {
    ASSERT_NE(FindArchitecture(name), nullptr) << name;
    EXPECT_EQ(FindArchitecture(name)->name, "qwen3");
  }
  EXPECT_EQ(FindArchitecture("gpt2"), nullptr);
  auto unknown = RequireArchitecture("gpt2");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("'gpt2'; this build supports: llama, qwen3"),
            std::string::npos)
      << unknown.status();
}

TEST(ModelProgram, FinalizeNumbersTheKvLayersOfAttentionBlocks) {
  ModelProgram p;
  p.layers.push_back(AttentionMlpLayer({}, {}));
  ProgramLayer two;  // two attention blocks and an MLP in one layer
  two.blocks = {AttentionBlock{}, MlpBlock{}, AttentionBlock{}};
  p.layers.push_back(two);
  ProgramLayer mlp_only;
  mlp_only.blocks = {MlpBlock{}};
  p.layers.push_back(mlp_only);
  EXPECT_EQ(p.Finalize().kv_layers, 3);
  EXPECT_EQ(FindBlock<AttentionBlock>(p.layers[0])->kv_layer, 0);
  EXPECT_EQ(std::get<AttentionBlock>(p.layers[1].blocks[0]).kv_layer, 1);
  EXPECT_EQ(std::get<AttentionBlock>(p.layers[1].blocks[2]).kv_layer, 2);
  EXPECT_EQ(FindBlock<AttentionBlock>(p.layers[2]), nullptr);
  int linears = 0;
  p.ForEachLinear([&](const LinearWeight&) { ++linears; });
  EXPECT_EQ(linears, 4 + 3 + (4 + 3 + 4) + 3);
}

class ProgramOnTinyQwen3 : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::LoadTinyQwen3();
    ASSERT_NE(model_, nullptr);
    auto p = BindModelProgram(*model_->checkpoint, model_->config);
    ASSERT_TRUE(p.ok()) << p.status();
    program_ = std::move(*p);
  }

  // The last position's logits of `program` over `tokens` (a fresh pool; taps through `hooks`).
  std::vector<float> Logits(ModelProgram program, const std::vector<int32_t>& tokens,
                            const ForwardHooks& hooks = {}) {
    const ModelConfig& c = model_->config;
    const int kv_layers = program.state().kv_layers;
    DecoderModel m(c, std::move(program));
    KvCacheOptions kv{kv_layers, c.num_kv_heads, c.head_dim, 16, 8, true};
    KvBlockPool pool(kv);
    KvSequence seq;
    pool.extend(seq, static_cast<int>(tokens.size()));
    BatchLogits logits;
    ThreadPool threads(2);
    EXPECT_TRUE(
        m.Forward(Batch{Phase::kPrefill, {{&seq, tokens, false}}}, pool, threads, &logits, hooks)
            .ok());
    return {logits.row(0), logits.row(0) + logits.vocab};
  }

  std::vector<int32_t> Tokens() const { return model_->tokenizer.Encode("one two three four"); }

  std::unique_ptr<Model> model_;
  ModelProgram program_;
};

TEST_F(ProgramOnTinyQwen3, Qwen3DeclaresAttentionWithQkNormThenMlpPerLayer) {
  ASSERT_EQ(static_cast<int>(program_.layers.size()), model_->config.num_layers);
  for (int l = 0; l < model_->config.num_layers; ++l) {
    const ProgramLayer& layer = program_.layers[l];
    ASSERT_EQ(layer.blocks.size(), 2u);
    const auto* a = std::get_if<AttentionBlock>(&layer.blocks[0]);
    ASSERT_NE(a, nullptr);
    EXPECT_TRUE(a->has_qk_norm());
    EXPECT_EQ(a->kv_layer, l);
    EXPECT_TRUE(std::holds_alternative<MlpBlock>(layer.blocks[1]));
  }
  EXPECT_EQ(program_.state().kv_layers, model_->config.num_layers);
}

TEST(ProgramOnSmolLM2, LlamaDeclaresAttentionWithoutQkNorm) {
  auto m = LoadModel(testing::SmolLM2Path());
  ASSERT_TRUE(m.ok()) << m.status();
  auto p = BindModelProgram(*(*m)->checkpoint, (*m)->config);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(static_cast<int>(p->layers.size()), (*m)->config.num_layers);
  for (const ProgramLayer& layer : p->layers) {
    const auto* a = FindBlock<AttentionBlock>(layer);
    ASSERT_NE(a, nullptr);
    EXPECT_FALSE(a->has_qk_norm());
    EXPECT_NE(FindBlock<MlpBlock>(layer), nullptr);
  }
}

// A block the program declares is what runs: an MLP block whose down projection is zero adds
// nothing (logits bit-identical), the same block with a non-zero down projection moves them, and
// dropping a layer's MLP moves them too.
TEST_F(ProgramOnTinyQwen3, TheCpuBackendRunsTheDeclaredBlocks) {
  const std::vector<float> base = Logits(program_, Tokens());
  const ModelConfig& c = model_->config;
  auto extra_mlp = [&](float down_value) {
    MlpBlock m = *FindBlock<MlpBlock>(program_.layers[0]);
    LinearWeight down;
    down.dtype = DType::kF32;
    down.out_features = c.hidden_size;
    down.in_features = c.intermediate_size;
    down.row_bytes = down.in_features * 4;
    std::vector<float> values(down.out_features * down.in_features, down_value);
    down.owned.resize(values.size() * 4);
    std::memcpy(down.owned.data(), values.data(), down.owned.size());
    down.data = down.owned.data();
    m.down = std::move(down);
    ModelProgram p = program_;
    p.layers[0].blocks.emplace_back(std::move(m));
    p.Finalize();
    return p;
  };
  EXPECT_EQ(Logits(extra_mlp(0.0f), Tokens()), base);
  EXPECT_NE(Logits(extra_mlp(0.01f), Tokens()), base);
  ModelProgram no_mlp = program_;
  no_mlp.layers[1].blocks.pop_back();
  EXPECT_NE(Logits(std::move(no_mlp), Tokens()), base);
}

TEST_F(ProgramOnTinyQwen3, TapsHandOutOnlyTheLayersAskedFor) {
  const std::vector<int32_t> tokens = Tokens();
  std::vector<int> seen;
  std::vector<float> last;
  ForwardHooks hooks;
  hooks.tap_layers = {1, 7, -1, 1};  // out of range and repeated: ignored / once
  hooks.on_layer_output = [&](int layer, std::span<const float> h) {
    seen.push_back(layer);
    last.assign(h.begin(), h.end());
  };
  const std::vector<float> tapped = Logits(program_, tokens, hooks);
  EXPECT_EQ(seen, std::vector<int>{1});
  EXPECT_EQ(last.size(), tokens.size() * model_->config.hidden_size);
  EXPECT_EQ(tapped, Logits(program_, tokens));  // taps observe, they change nothing
  // Without a callback the layer list means nothing.
  ForwardHooks no_callback;
  no_callback.tap_layers = {0, 1};
  EXPECT_TRUE(TapSet(no_callback, 2).empty());
  const TapSet taps(hooks, model_->config.num_layers);
  EXPECT_EQ(taps.slot(1), 0);
  EXPECT_EQ(taps.slot(0), -1);
}

// ForwardFrom(l, the residual stream entering layer l) computes what the whole pass computes:
// the later layers see the same inputs and read only their own KV layers.
TEST_F(ProgramOnTinyQwen3, ForwardFromALayersInputEqualsTheWholePass) {
  const ModelConfig& c = model_->config;
  DecoderModel m(c, program_);
  KvCacheOptions kv{c.num_layers, c.num_kv_heads, c.head_dim, 16, 16, true};
  KvBlockPool pool(kv);
  ThreadPool threads(2);
  const std::vector<int32_t> tokens = Tokens();
  std::vector<float> entering;
  ForwardHooks hooks;
  hooks.tap_layers = {0};
  hooks.on_layer_output = [&](int, std::span<const float> h) {
    entering.assign(h.begin(), h.end());
  };
  KvSequence a, b;
  pool.extend(a, static_cast<int>(tokens.size()));
  pool.extend(b, static_cast<int>(tokens.size()));
  BatchLogits whole, from;
  ASSERT_TRUE(
      m.Forward(Batch{Phase::kPrefill, {{&a, tokens, true}}}, pool, threads, &whole, hooks).ok());
  ASSERT_TRUE(
      m.ForwardFrom(1, entering, Batch{Phase::kPrefill, {{&b, tokens, true}}}, pool, threads, &from)
          .ok());
  EXPECT_EQ(from.values, whole.values);
  EXPECT_EQ(b.num_tokens, a.num_tokens);
  // A decode step from there reads layer 1's KV that ForwardFrom wrote.
  const int32_t next = 7;
  ASSERT_TRUE(m.Forward(Batch{Phase::kDecode, {{&a, std::span(&next, 1), false}}}, pool, threads,
                        &whole, hooks)
                  .ok());
  ASSERT_TRUE(m.ForwardFrom(1, entering, Batch{Phase::kDecode, {{&b, std::span(&next, 1), false}}},
                            pool, threads, &from)
                  .ok());
  EXPECT_EQ(from.values, whole.values);
  EXPECT_FALSE(m.ForwardFrom(1, std::span(entering).first(3),
                             Batch{Phase::kDecode, {{&b, std::span(&next, 1), false}}}, pool,
                             threads, &from)
                   .ok());
  pool.release(a);
  pool.release(b);
}

TEST_F(ProgramOnTinyQwen3, TheRunnerSizesTheKvCacheByTheProgram) {
  ModelRunnerOptions o;
  o.threads = 1;
  o.kv_capacity = 64;
  auto r = ModelRunner::Create(*model_->checkpoint, model_->config, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->kv_pool().options().num_layers, program_.state().kv_layers);
}

}  // namespace
}  // namespace dq
