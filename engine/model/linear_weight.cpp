#include "engine/model/linear_weight.h"

#include "engine/quant/ggml_blocks.h"

namespace dq {

void DequantizeLinearRow(const LinearWeight& w, int64_t r, float* dst) {
  if (w.codec != nullptr) {
    w.codec->DequantizeRow(w.quantized, r, dst);
  } else {
    DequantizeRow(w.dtype, w.row(r), dst, w.in_features);
  }
}

}  // namespace dq
