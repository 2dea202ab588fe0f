// A weight matrix as the engine consumes it: [out_features, in_features] rows in one dtype.
#pragma once

#include <cstdint>
#include <vector>

#include "common/dtype.h"

namespace dq {

// Rows of `in_features` values each, `row_bytes` apart. Points into the mapped checkpoint,
// or into `owned` when the loader had to convert the stored tensor.
struct LinearWeight {
  DType dtype = DType::kF32;
  int64_t out_features = 0;
  int64_t in_features = 0;
  int64_t row_bytes = 0;
  const uint8_t* data = nullptr;
  std::vector<uint8_t> owned;

  const uint8_t* row(int64_t r) const { return data + r * row_bytes; }
};

}  // namespace dq
