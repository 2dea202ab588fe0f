// The tiled block-scale layout for cuBLASLt's VEC16_UE4M3 mode: ScalesToTiled (which decodes
// output positions) against the documented offset formula, hand-worked offsets, padding.
#include "engine/quant/nvfp4_scale_layout.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <vector>

namespace dq {
namespace {

// The cuBLAS documentation's formula, written out separately from the header's: tiles of 128 x 4
// in (row tile, column tile) order, then 32 x 4 x 4 inside a tile.
int64_t DocOffset(int64_t r, int64_t c, int64_t cols) {
  const int64_t col_tiles = (cols + 3) / 4;
  return ((r / 128) * col_tiles + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4;
}

TEST(Nvfp4ScaleLayout, HandWorkedOffsets) {
  // 300 rows x 10 scale columns (K = 160): 3 column tiles per row tile.
  EXPECT_EQ(TiledScaleOffset(0, 0, 10), 0);
  EXPECT_EQ(TiledScaleOffset(0, 3, 10), 3);
  EXPECT_EQ(TiledScaleOffset(1, 0, 10), 16);  // next row: 16 bytes on
  EXPECT_EQ(TiledScaleOffset(32, 0, 10), 4);  // second band of 32 rows: 4 bytes on
  EXPECT_EQ(TiledScaleOffset(127, 3, 10), 31 * 16 + 3 * 4 + 3);
  EXPECT_EQ(TiledScaleOffset(0, 4, 10), 512);        // next column tile
  EXPECT_EQ(TiledScaleOffset(128, 0, 10), 3 * 512);  // next row tile after 3 column tiles
  EXPECT_EQ(TiledScaleOffset(299, 9, 10), (2 * 3 + 2) * 512 + 11 * 16 + 1 * 4 + 1);
  EXPECT_EQ(TiledScaleRows(300), 384);
  EXPECT_EQ(TiledScaleCols(10), 12);
  EXPECT_EQ(TiledScaleBytes(300, 10), 384 * 12);
  EXPECT_EQ(TiledScaleBytes(1, 1), 512);
}

TEST(Nvfp4ScaleLayout, ScalesToTiledMatchesFormula) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const int64_t shapes[][2] = {{1, 1},   {1, 4},    {3, 2},    {127, 4},   {128, 4},  {129, 5},
                               {256, 8}, {300, 10}, {77, 160}, {513, 161}, {1024, 64}};
  for (const auto& s : shapes) {
    const int64_t rows = s[0], cols = s[1];
    SCOPED_TRACE(testing::Message() << rows << " x " << cols);
    std::vector<uint8_t> scales(static_cast<size_t>(rows * cols));
    // Values 1..255 so that a misplaced scale never looks like padding.
    for (uint8_t& v : scales) v = static_cast<uint8_t>(1 + rng() % 255);
    const std::vector<uint8_t> tiled = ScalesToTiled(scales.data(), rows, cols);
    ASSERT_EQ(static_cast<int64_t>(tiled.size()), TiledScaleBytes(rows, cols));
    std::set<int64_t> used;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t off = DocOffset(r, c, cols);
        ASSERT_EQ(TiledScaleOffset(r, c, cols), off) << "row " << r << " col " << c;
        ASSERT_LT(off, static_cast<int64_t>(tiled.size()));
        ASSERT_EQ(tiled[off], scales[r * cols + c]) << "row " << r << " col " << c;
        ASSERT_TRUE(used.insert(off).second) << "two scales at offset " << off;
      }
    }
    // Every byte no scale maps to is padding, and zero.
    for (int64_t i = 0; i < static_cast<int64_t>(tiled.size()); ++i) {
      if (!used.count(i)) ASSERT_EQ(tiled[i], 0) << "padding byte " << i;
    }
  }
}

}  // namespace
}  // namespace dq
