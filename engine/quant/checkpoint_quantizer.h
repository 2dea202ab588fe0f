// Writes a quantized (or re-typed) HF-style checkpoint from any model we can load: the
// engine side of `dq-quantize`.
#pragma once

#include <string>

#include "common/dtype.h"
#include "common/status.h"
#include "engine/model/model_loader.h"

namespace dq {

struct QuantizeCheckpointOptions {
  // A codec scheme ("nvfp4", "fp8", "int4", "lut2", ...) for the linear layers, or "bf16" /
  // "f32" to store them unquantized.
  std::string format;
  int group_size = 0;  // intN: 32, 64 or 128 (0: 128)
  // Text file whose tokens calibrate the activation scales (nvfp4 w4a4); empty: no
  // calibration (w4a4 then falls back to per-row dynamic global scales).
  std::string calib_file;
  int calib_tokens = 512;
  DType embedding_dtype = DType::kBF16;  // embeddings and an untied lm_head
  bool progress = true;                  // per-layer progress on stderr
  int threads = 0;
};

// Reads every tensor of `source` (dequantizing GGUF blocks to fp32), quantizes the linear
// layers, and writes `out_dir`/{model.safetensors, config.json, tokenizer files}. Errors: the
// source is already quantized with a scheme, a tensor the architecture does not use, an
// unknown format, a bad group size.
absl::Status QuantizeCheckpoint(const Model& source, const std::string& out_dir,
                                const QuantizeCheckpointOptions& options);

}  // namespace dq
