// The n-gram drafter's lookup, speculation config checks, adaptive k and KV truncation.
#include "engine/spec/ngram_drafter.h"

#include <gtest/gtest.h>

#include "engine/kvcache/kv_block_pool.h"
#include "engine/spec/spec_config.h"

namespace dq {
namespace {

using V = std::vector<int32_t>;

TEST(NgramDrafterTest, ProposesWhatFollowedTheLongestMostRecentMatch) {
  NgramDrafter d;
  // Suffix "1 2 3" occurred at 0 (followed by 4 5) and at 5 (followed by 9): the most recent wins.
  EXPECT_EQ(d.Lookup(V{1, 2, 3, 4, 5, 1, 2, 3, 9, 7, 1, 2, 3}, 4), (V{9, 7, 1, 2}));
  // A trigram match beats a more recent unigram one.
  EXPECT_EQ(d.Lookup(V{5, 6, 7, 8, 0, 7, 3, 5, 6, 7}, 2), (V{8, 0}));
  // No trigram or bigram match: fall back to the last token alone.
  EXPECT_EQ(d.Lookup(V{4, 1, 9, 8, 4}, 3), (V{1, 9, 8}));
  // The continuation may run into the suffix itself (a repeating pattern).
  EXPECT_EQ(d.Lookup(V{1, 1, 1}, 5), (V{1}));
}

TEST(NgramDrafterTest, ProposesNothingWithoutAMatchOrRoom) {
  NgramDrafter d;
  EXPECT_TRUE(d.Lookup(V{1, 2, 3, 4}, 4).empty());
  EXPECT_TRUE(d.Lookup(V{7}, 4).empty());
  EXPECT_TRUE(d.Lookup(V{}, 4).empty());
  EXPECT_TRUE(d.Lookup(V{1, 2, 1}, 0).empty());
  NgramDrafterOptions only_trigrams;
  only_trigrams.min_ngram = 3;
  EXPECT_TRUE(NgramDrafter(only_trigrams).Lookup(V{4, 1, 9, 8, 4}, 3).empty());
}

TEST(NgramDrafterTest, ProposeFillsOneDraftPerRequest) {
  NgramDrafter d;
  const V a{1, 2, 1}, b{3, 4, 5};
  std::vector<DraftRequest> reqs = {{0, a, 4}, {1, b, 4}};
  std::vector<Draft> drafts(2);
  ASSERT_TRUE(d.Propose(reqs, drafts).ok());
  EXPECT_EQ(drafts[0].tokens, (V{2, 1}));
  EXPECT_TRUE(drafts[1].tokens.empty());
  EXPECT_TRUE(d.deterministic());
  std::vector<Draft> one(1);
  EXPECT_FALSE(d.Propose(reqs, one).ok());
}

TEST(SpecConfigTest, BadConfigurationIsAClearError) {
  SpecConfig c;
  for (int k : {1, 4, kMaxSpecK}) {
    c.k = k;
    EXPECT_TRUE(Validate(c).ok()) << k;
  }
  for (int k : {0, -1, kMaxSpecK + 1}) {
    c.k = k;
    const absl::Status s = Validate(c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("--spec-k must be in [1, 16]"), std::string::npos) << s;
  }
  ModelConfig target;
  target.vocab_size = 100;
  auto ok = CreateDrafter("ngram", target);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->name(), "ngram");
  const auto unknown = CreateDrafter("medusa", target).status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("known: ngram"), std::string::npos) << unknown;
  const auto self = CreateDrafter("self", target).status();
  EXPECT_EQ(self.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(self.message().find("--draft-format"), std::string::npos) << self;
  const auto dflash = CreateDrafter("dflash", target).status();
  EXPECT_EQ(dflash.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dflash.message().find("--draft-weights"), std::string::npos) << dflash;
  NgramDrafterOptions bad;
  bad.min_ngram = 0;
  EXPECT_FALSE(NgramDrafter(bad).CheckTarget(target).ok());
}

TEST(AdaptiveKTest, GrowsOnAcceptanceShrinksOnRejectionWithinBounds) {
  AdaptiveK k(6, true);
  EXPECT_EQ(k.k(), 6);
  for (int i = 0; i < 20; ++i) k.Update(k.k(), 0);
  EXPECT_EQ(k.k(), 1);
  for (int i = 0; i < 20; ++i) k.Update(k.k(), k.k());
  EXPECT_EQ(k.k(), 6);
  AdaptiveK fixed(3, false);
  for (int i = 0; i < 20; ++i) fixed.Update(3, 0);
  EXPECT_EQ(fixed.k(), 3);
  EXPECT_LT(fixed.rate(), 0.01);
}

TEST(KvBlockPoolTruncateTest, FreesTheBlocksPastTheKeptTokens) {
  KvCacheOptions o;
  o.num_layers = 1;
  o.num_kv_heads = 1;
  o.head_dim = 2;
  o.block_size = 4;
  o.num_blocks = 8;
  KvBlockPool pool(o);
  KvSequence seq;
  pool.extend(seq, 13);
  seq.num_tokens = 13;
  EXPECT_EQ(pool.num_free_blocks(), 4);
  pool.truncate(seq, 9);  // 3 blocks hold 9 tokens
  EXPECT_EQ(seq.num_tokens, 9);
  EXPECT_EQ(seq.blocks.size(), 3u);
  EXPECT_EQ(pool.num_free_blocks(), 5);
  pool.truncate(seq, 12);  // never grows
  EXPECT_EQ(seq.num_tokens, 9);
  EXPECT_EQ(seq.blocks.size(), 3u);
  pool.release(seq);
  EXPECT_EQ(pool.num_free_blocks(), 8);
}

}  // namespace
}  // namespace dq
