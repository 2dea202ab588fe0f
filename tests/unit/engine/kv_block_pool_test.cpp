#include "engine/kvcache/kv_block_pool.h"

#include <gtest/gtest.h>

namespace dq {
namespace {

KvCacheOptions SmallPool() {
  KvCacheOptions o;
  o.num_layers = 2;
  o.num_kv_heads = 2;
  o.head_dim = 4;
  o.block_size = 4;
  o.num_blocks = 8;
  return o;
}

TEST(KvBlockPoolTest, AllocatesContiguousRunsAndFrees) {
  KvBlockPool pool(SmallPool());
  EXPECT_EQ(pool.num_free_blocks(), 8);
  ASSERT_TRUE(pool.can_allocate(3));
  EXPECT_EQ(pool.allocate(3), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FALSE(pool.can_allocate(6));
  std::vector<int32_t> b = pool.allocate(5);
  EXPECT_EQ(pool.num_free_blocks(), 0);
  pool.free(std::vector<int32_t>{1});
  EXPECT_EQ(pool.allocate(1), (std::vector<int32_t>{1}));
}

TEST(KvBlockPoolTest, ExtendAddsOnlyMissingBlocks) {
  KvBlockPool pool(SmallPool());
  KvSequence seq;
  ASSERT_TRUE(pool.can_extend(seq, 5));
  pool.extend(seq, 5);
  EXPECT_EQ(seq.blocks.size(), 2u);
  pool.extend(seq, 8);
  EXPECT_EQ(seq.blocks.size(), 2u);
  pool.extend(seq, 9);
  EXPECT_EQ(seq.blocks.size(), 3u);
  EXPECT_FALSE(pool.can_extend(seq, 4 * 9));
  pool.release(seq);
  EXPECT_TRUE(seq.blocks.empty());
  EXPECT_EQ(pool.num_free_blocks(), 8);
}

TEST(KvBlockPoolTest, SlotsDoNotOverlapAcrossLayersBlocksAndKinds) {
  KvBlockPool pool(SmallPool());
  // Write a distinct value to every (layer, block, slot) of K and V, then read all back.
  float tag = 0;
  for (int l = 0; l < 2; ++l)
    for (int b = 0; b < 8; ++b)
      for (int s = 0; s < 4; ++s)
        for (int i = 0; i < 8; ++i) {
          pool.key(l, b, s)[i] = tag++;
          pool.value(l, b, s)[i] = tag++;
        }
  tag = 0;
  for (int l = 0; l < 2; ++l)
    for (int b = 0; b < 8; ++b)
      for (int s = 0; s < 4; ++s)
        for (int i = 0; i < 8; ++i) {
          ASSERT_EQ(pool.key(l, b, s)[i], tag++);
          ASSERT_EQ(pool.value(l, b, s)[i], tag++);
        }
}

}  // namespace
}  // namespace dq

namespace dq {
namespace {

// The one byte layout (KvTensorLayout) is where key()/value() put each block, on the host pool,
// and the same description scaled to another element size is the device cache's.
TEST(KvBlockPoolTest, LayoutIsWhereEveryBlockLives) {
  KvCacheOptions o{3, 2, 8, 4, 5, true};
  KvBlockPool pool(o);
  const KvTensorLayout l = pool.layout();
  EXPECT_EQ(l.num_layers, 3);
  EXPECT_EQ(l.num_blocks, 5);
  EXPECT_EQ(l.block_size, 4);
  EXPECT_EQ(l.block_bytes, 4u * 2 * 8 * sizeof(float));
  EXPECT_EQ(l.tensor_bytes(), pool.region_bytes());
  const char* keys = reinterpret_cast<const char*>(pool.keys_data());
  const char* values = reinterpret_cast<const char*>(pool.values_data());
  for (int layer = 0; layer < 3; ++layer) {
    for (int32_t block = 0; block < 5; ++block) {
      EXPECT_EQ(reinterpret_cast<const char*>(pool.key(layer, block, 0)),
                keys + l.offset(layer, block));
      EXPECT_EQ(reinterpret_cast<const char*>(pool.value(layer, block, 3)),
                values + l.offset(layer, block) + 3 * 2 * 8 * sizeof(float));
      EXPECT_EQ(pool.block_offset(layer, block), l.offset(layer, block));
    }
  }
  EXPECT_EQ(pool.layout(2).block_bytes, l.block_bytes / 2);
  EXPECT_EQ(pool.layout(2).offset(2, 1), l.offset(2, 1) / 2);
}

}  // namespace
}  // namespace dq
