// cuBLASLt's tiled layout for NVFP4 block scales (CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3), the
// layout Blackwell's block-scaled FP4 GEMMs read them in. A scale matrix of logical shape
// [rows, cols] (rows: the operand's outer dimension, tokens or output channels; cols: K / 16,
// scale (r, c) applying to elements r, 16c..16c+15) is padded to [round_up(rows, 128),
// round_up(cols, 4)] and cut into 128 x 4 tiles of 512 bytes, stored one after another with the
// K tile index fastest. Inside a tile, the 128 rows form four bands of 32 that are interleaved:
// scale (r, c) sits at (r % 32) * 16 + (r / 32) * 4 + c (cuBLAS documentation, "1D Block Scaling
// Factors Layout"; the same 128x4 layout cuDNN documents). Padding bytes are zero (a zero scale
// times the absent or zero elements adds nothing).
//
// Pure index arithmetic, usable from host code and CUDA kernels alike.
#pragma once

#include <cstdint>
#include <vector>

#if defined(__CUDACC__)
#define DQ_HOST_DEVICE __host__ __device__
#else
#define DQ_HOST_DEVICE
#endif

namespace dq {

inline constexpr int64_t kScaleTileRows = 128;
inline constexpr int64_t kScaleTileCols = 4;
inline constexpr int64_t kScaleTileBytes = kScaleTileRows * kScaleTileCols;

DQ_HOST_DEVICE constexpr int64_t TiledScaleRows(int64_t rows) {
  return (rows + kScaleTileRows - 1) / kScaleTileRows * kScaleTileRows;
}
DQ_HOST_DEVICE constexpr int64_t TiledScaleCols(int64_t cols) {
  return (cols + kScaleTileCols - 1) / kScaleTileCols * kScaleTileCols;
}
// Bytes of the tiled scale tensor for a [rows, cols] scale matrix.
DQ_HOST_DEVICE constexpr int64_t TiledScaleBytes(int64_t rows, int64_t cols) {
  return TiledScaleRows(rows) * TiledScaleCols(cols);
}
// Byte offset of scale (row, col) of a matrix with `cols` scale columns.
DQ_HOST_DEVICE constexpr int64_t TiledScaleOffset(int64_t row, int64_t col, int64_t cols) {
  const int64_t tile =
      (row / kScaleTileRows) * (TiledScaleCols(cols) / kScaleTileCols) + col / kScaleTileCols;
  return tile * kScaleTileBytes + (row % 32) * 16 + (row % kScaleTileRows / 32) * 4 +
         col % kScaleTileCols;
}

// Row-major scales [rows, cols] -> the tiled layout (TiledScaleBytes(rows, cols) bytes, padding
// zero).
std::vector<uint8_t> ScalesToTiled(const uint8_t* scales, int64_t rows, int64_t cols);

}  // namespace dq
