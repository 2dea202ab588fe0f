// ODP's backend-independent parts (engine/model/odp_policy.h): which weights each prefill pass
// runs on, the crossover read off measured timings, calibration over a pool, and the start-up
// checks that refuse a prefill checkpoint decode cannot share a KV cache or tokenizer with.
#include "engine/model/odp_policy.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/model/model_config.h"

namespace dq {
namespace {

ModelConfig Config() {
  ModelConfig c;
  c.architecture = "qwen3";
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.max_context = 512;
  return c;
}

// Records the passes it runs and fills logits with its own tag, so a test sees which side ran.
class TaggedModel : public ForwardModel {
 public:
  TaggedModel(ModelConfig c, float tag) : config_(c), tag_(tag) {}
  const ModelConfig& config() const override { return config_; }
  std::string_view backend() const override { return "tagged"; }
  absl::Status Forward(const Batch& batch, KvBlockPool&, ThreadPool&, BatchLogits* logits,
                       const ForwardHooks&) const override {
    tokens_seen.push_back(batch.num_tokens());
    logits->vocab = config_.vocab_size;
    logits->values.assign(config_.vocab_size, tag_);
    logits->item_first_row = {0};
    for (const BatchItem& it : batch.items) it.kv->num_tokens += static_cast<int>(it.tokens.size());
    return absl::OkStatus();
  }
  mutable std::vector<int64_t> tokens_seen;

 private:
  ModelConfig config_;
  float tag_;
};

Batch Prefill(KvSequence& seq, const std::vector<int32_t>& ids) {
  return Batch{Phase::kPrefill, {{&seq, ids, false}}};
}

TEST(OdpForwardModel, PassesBelowTheCrossoverRunResidentFromItStreamed) {
  auto resident = std::make_shared<TaggedModel>(Config(), 1.0f);
  auto streamed = std::make_shared<TaggedModel>(Config(), 2.0f);
  OdpForwardModel odp(resident, streamed, 1000);
  KvBlockPool pool(KvCacheOptions{2, 2, 8, 16, 256, false});
  ThreadPool threads(1);
  for (int n : {1, 999, 1000, 3000}) {
    KvSequence seq;
    pool.extend(seq, n);
    BatchLogits logits;
    ASSERT_TRUE(
        odp.Forward(Prefill(seq, std::vector<int32_t>(n, 3)), pool, threads, &logits, {}).ok());
    EXPECT_EQ(logits.values[0], n >= 1000 ? 2.0f : 1.0f) << n << " tokens";
    EXPECT_EQ(seq.num_tokens, n);
    pool.release(seq);
  }
  EXPECT_EQ(resident->tokens_seen, (std::vector<int64_t>{1, 999}));
  EXPECT_EQ(streamed->tokens_seen, (std::vector<int64_t>{1000, 3000}));
  EXPECT_EQ(odp.resident_passes(), 2);
  EXPECT_EQ(odp.streamed_passes(), 2);
}

TEST(OdpForwardModel, DecidesPerPassOnAllOfItsTokens) {
  // Two 600-token prompts in one pass pay one stream: together they cross a 1000 crossover.
  auto resident = std::make_shared<TaggedModel>(Config(), 1.0f);
  auto streamed = std::make_shared<TaggedModel>(Config(), 2.0f);
  OdpForwardModel odp(resident, streamed, 1000);
  KvSequence a, b;
  std::vector<int32_t> ids(600, 5);
  Batch two{Phase::kPrefill, {{&a, ids, false}, {&b, ids, false}}};
  EXPECT_TRUE(odp.Streams(two));
  EXPECT_FALSE(odp.Streams(Batch{Phase::kPrefill, {{&a, ids, false}}}));
  OdpForwardModel never(resident, streamed, kOdpNeverStream);
  EXPECT_FALSE(never.Streams(two));
}

TEST(OdpCrossover, InterpolatesBetweenTheLastSlowerAndFirstFasterLength) {
  // Resident 0.1 ms/token; streamed 300 ms + 0.02 ms/token: equal at 3750 tokens.
  std::vector<OdpTiming> t;
  for (int64_t n : {512, 1024, 2048, 4096, 8192}) {
    t.push_back({n, 1e-4 * n, 0.3 + 2e-5 * n});
  }
  auto x = CrossoverFromTimings(t);
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_NEAR(static_cast<double>(*x), 3750, 1);
}

TEST(OdpCrossover, EdgesAndNoise) {
  // Streaming always faster: the first length. Never faster: never stream.
  std::vector<OdpTiming> fast = {{128, 1.0, 0.5}, {1024, 2.0, 1.0}};
  EXPECT_EQ(*CrossoverFromTimings(fast), 128);
  std::vector<OdpTiming> slow = {{128, 0.5, 1.0}, {1024, 1.0, 2.0}};
  EXPECT_EQ(*CrossoverFromTimings(slow), kOdpNeverStream);
  // A lucky short measurement does not count if streaming loses again at a longer one.
  std::vector<OdpTiming> noisy = {{128, 1.0, 0.9}, {1024, 1.0, 1.5}, {4096, 3.0, 1.0}};
  const int64_t x = *CrossoverFromTimings(noisy);
  EXPECT_GT(x, 1024);
  EXPECT_LE(x, 4096);
  // Streaming slower only at the longest length: never.
  std::vector<OdpTiming> late = {{128, 1.0, 0.5}, {1024, 1.0, 2.0}};
  EXPECT_EQ(*CrossoverFromTimings(late), kOdpNeverStream);
  EXPECT_FALSE(CrossoverFromTimings({}).ok());
  std::vector<OdpTiming> unordered = {{1024, 1, 1}, {128, 1, 1}};
  EXPECT_FALSE(CrossoverFromTimings(unordered).ok());
}

TEST(OdpCalibration, TimesEachLengthOnBothSidesAndReleasesItsBlocks) {
  TaggedModel resident(Config(), 1.0f), streamed(Config(), 2.0f);
  KvBlockPool pool(KvCacheOptions{2, 2, 8, 16, 64, false});  // 1024 tokens
  ThreadPool threads(1);
  OdpCalibrationOptions o;
  o.lengths = {100, 500, 2000};
  o.repeats = 2;
  auto t = MeasureOdpTimings(resident, streamed, pool, threads, /*max_tokens=*/600, o);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 2u);  // 2000 exceeds both the pass size and the pool
  EXPECT_EQ((*t)[0].tokens, 100);
  EXPECT_EQ((*t)[1].tokens, 500);
  // One 16-token warm-up each, then `repeats` passes per length on each side.
  EXPECT_EQ(resident.tokens_seen, (std::vector<int64_t>{16, 100, 100, 500, 500}));
  EXPECT_EQ(streamed.tokens_seen, resident.tokens_seen);
  EXPECT_EQ(pool.num_free_blocks(), 64);
  o.lengths = {4000};
  EXPECT_FALSE(MeasureOdpTimings(resident, streamed, pool, threads, 600, o).ok());
}

std::string CheckMessage(void (*edit)(ModelConfig&)) {
  ModelConfig p = Config(), d = Config();
  edit(p);
  absl::Status s = CheckOdpConfigs(p, d);
  return s.ok() ? "" : std::string(s.message());
}

TEST(OdpChecks, APrefillCheckpointOfAnotherLayoutIsRefused) {
  EXPECT_TRUE(CheckOdpConfigs(Config(), Config()).ok());
  EXPECT_NE(CheckMessage([](ModelConfig& c) { c.num_layers = 3; }).find("layers 3"),
            std::string::npos);
  EXPECT_NE(CheckMessage([](ModelConfig& c) { c.num_kv_heads = 4; }).find("KV heads 4"),
            std::string::npos);
  EXPECT_NE(CheckMessage([](ModelConfig& c) { c.head_dim = 16; }).find("head dim 16"),
            std::string::npos);
  EXPECT_NE(CheckMessage([](ModelConfig& c) { c.vocab_size = 65; }).find("vocabulary"),
            std::string::npos);
  EXPECT_NE(CheckMessage([](ModelConfig& c) { c.architecture = "llama"; }).find("architecture"),
            std::string::npos);
  EXPECT_NE(CheckMessage([](ModelConfig& c) { c.rope_theta = 5e5f; }).find("rope"),
            std::string::npos);
  EXPECT_NE(CheckMessage([](ModelConfig& c) { c.num_layers = 3; }).find("same model"),
            std::string::npos);
}

TEST(OdpChecks, APrefillCheckpointWithAnotherTokenizerIsRefused) {
  const std::string dir = std::string(DQ_SOURCE_DIR) + "/tests/golden/tokenizer/";
  auto qwen = Tokenizer::FromHfJson(dir + "qwen-style/tokenizer.json");
  auto qwen2 = Tokenizer::FromHfJson(dir + "qwen-style/tokenizer.json");
  auto smol = Tokenizer::FromHfJson(dir + "smollm2/tokenizer.json");
  ASSERT_TRUE(qwen.ok() && qwen2.ok() && smol.ok());
  EXPECT_TRUE(CheckOdpTokenizers(*qwen, *qwen2).ok());
  absl::Status s = CheckOdpTokenizers(*smol, *qwen);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("tokenizer differs"), std::string::npos) << s;
}

}  // namespace
}  // namespace dq
