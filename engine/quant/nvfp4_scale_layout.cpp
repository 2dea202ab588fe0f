#include "engine/quant/nvfp4_scale_layout.h"

#include <cstddef>

namespace dq {

// Walks the output bytes and decodes each position (the inverse of TiledScaleOffset), so that
// the unit test's comparison with TiledScaleOffset checks two independent derivations.
std::vector<uint8_t> ScalesToTiled(const uint8_t* scales, int64_t rows, int64_t cols) {
  const int64_t col_tiles = TiledScaleCols(cols) / kScaleTileCols;
  const int64_t tiles = TiledScaleRows(rows) / kScaleTileRows * col_tiles;
  std::vector<uint8_t> out(static_cast<size_t>(tiles * kScaleTileBytes), 0);
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t row0 = t / col_tiles * kScaleTileRows, col0 = t % col_tiles * kScaleTileCols;
    for (int64_t i = 0; i < kScaleTileBytes; ++i) {
      const int64_t row = row0 + (i / 16) + 32 * ((i / kScaleTileCols) % 4);
      const int64_t col = col0 + i % kScaleTileCols;
      if (row < rows && col < cols) out[t * kScaleTileBytes + i] = scales[row * cols + col];
    }
  }
  return out;
}

}  // namespace dq
