// Writing a model's side files in HF layout (config.json, tokenizer.json,
// tokenizer_config.json), so a checkpoint that dq-quantize derives from a GGUF file is a
// self-contained HF-style directory.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "engine/model/model_config.h"

namespace dq {

class GgufFile;

// config.json for `config` (quantization_config is left for the caller; Gemma 3 and Qwen3.5
// fields by their HfFromGguf::config, hf_from_gguf.h). Llama weights taken
// from GGUF keep llama.cpp's q/k row order, recorded as "dq_rope_interleaved".
nlohmann::json HfConfigJson(const ModelConfig& config);

// tokenizer.json equivalent to the GGUF's tokenizer (byte-level BPE; pre-tokenizers gpt-2,
// smollm, qwen2). Control and user-defined tokens become added tokens.
absl::StatusOr<nlohmann::json> HfTokenizerJsonFromGguf(const GgufFile& gguf);

// Copies or derives config-independent side files from the model at `source_path` (a .gguf or
// an HF directory) into `out_dir`: tokenizer.json and tokenizer_config.json.
absl::Status WriteTokenizerFiles(const std::string& source_path, const std::string& out_dir);

}  // namespace dq
