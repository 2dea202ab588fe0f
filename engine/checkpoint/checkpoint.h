// A checkpoint: named tensors in one or more memory-mapped files.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"

namespace dq {

// A tensor stored in a mapped checkpoint file. `shape` is row-major, outermost first (GGUF's
// ne[] reversed), so a linear layer's weight is [out_features, in_features] in every format.
// `data` stays valid as long as the Checkpoint that returned it lives.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  int64_t nbytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t rows() const { return shape.size() < 2 ? 1 : numel() / shape.back(); }
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
};

// Read-only access to a checkpoint's tensors. Implementations validate every tensor's bounds at
// open time, so a returned view never points outside its file.
class Checkpoint {
 public:
  virtual ~Checkpoint() = default;
  // "gguf" or "safetensors".
  virtual std::string_view format() const = 0;
  // All tensors, in file order.
  virtual const std::vector<TensorView>& tensors() const = 0;
  // The tensor named `name` (the file's own naming), or nullptr.
  virtual const TensorView* Find(std::string_view name) const = 0;
};

}  // namespace dq
