// Opens a model path (a .gguf file, or a directory with config.json + safetensors +
// tokenizer.json) into everything serving needs: tensors, config, tokenizer, chat template.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/chat_template.h"
#include "common/status.h"
#include "common/tokenizer/tokenizer.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/model_config.h"

namespace dq {

struct Model {
  std::string path;
  std::unique_ptr<Checkpoint> checkpoint;
  ModelConfig config;
  Tokenizer tokenizer;
  // Absent when the checkpoint has no template; one that does not parse is a load error.
  std::optional<ChatTemplate> chat_template;
};

// Errors name the path and say what is missing or wrong (not found, corrupt, unknown
// architecture, a chat template that does not parse, tokenizer/vocabulary mismatch).
absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& path);

}  // namespace dq
