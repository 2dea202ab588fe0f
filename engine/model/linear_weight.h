// A weight matrix as the engine consumes it: [out_features, in_features] rows in one dtype.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/dtype.h"
#include "engine/quant/weight_codec.h"

namespace dq {

namespace cpu {
struct Q8Packed;  // engine/cpu/q8_packed.h
}

// Rows of `in_features` values each, `row_bytes` apart. Points into the mapped checkpoint,
// or into `owned` when the loader had to convert the stored tensor.
// When `codec` is set the matrix is in a quantization scheme (fp8, nvfp4, intN, lutN): its
// components are in `quantized`, and `dtype`/`data`/`row_bytes` are unused.
struct LinearWeight {
  const WeightCodec* codec = nullptr;
  QuantizedView quantized;
  std::shared_ptr<const QuantizedTensors> owned_quantized;  // when converted at load (GPTQ)
  ComputeMode mode = ComputeMode::kWeightOnly;
  // w4a4: the layer's static activation global scale (input_global_scale = 6 * 448 / calibrated
  // input amax, as stored); 0: per-row dynamic.
  float act_global_scale = 0.0f;

  DType dtype = DType::kF32;
  int64_t out_features = 0;
  int64_t in_features = 0;
  int64_t row_bytes = 0;
  const uint8_t* data = nullptr;
  std::vector<uint8_t> owned;
  // The CPU's q8 decode layout of these rows (cpu::PackLinearForQ8), made at load when that path
  // is on; null otherwise.
  std::shared_ptr<const cpu::Q8Packed> q8_packed;

  const uint8_t* row(int64_t r) const { return data + r * row_bytes; }
};

// Row `r` of `w` as its in_features fp32 values, whatever it is stored as (a float dtype, GGUF
// blocks, or a quantization scheme's components).
void DequantizeLinearRow(const LinearWeight& w, int64_t r, float* dst);

}  // namespace dq
