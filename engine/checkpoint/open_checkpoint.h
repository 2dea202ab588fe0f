// Opens a checkpoint of any supported format.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "engine/checkpoint/checkpoint.h"

namespace dq {

// `path` is a .gguf file (detected by its magic), a .safetensors file, a
// model.safetensors.index.json, or a directory holding safetensors weights (or exactly one
// .gguf file). The result is a GgufFile or a SafetensorsCheckpoint.
absl::StatusOr<std::unique_ptr<Checkpoint>> OpenCheckpoint(const std::string& path);

}  // namespace dq
