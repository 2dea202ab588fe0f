// Where a self-drafter's weights come from: a checkpoint of their own (a dq-quantize output, a
// GGUF IQ2 file, a smaller model of the same family), or the target's base checkpoint quantized
// at load time through the same path dq-quantize takes.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "engine/model/model_loader.h"

namespace dq {

struct DraftModelOptions {
  std::string weights;  // a checkpoint to draft with, as it is
  std::string format;   // or: a codec scheme ("int2", "lut2", ...) or bf16 to quantize the base to
  int group_size = 0;   // intN group size (0: the codec's default)
  int threads = 0;
};

// Exactly one of options.weights and options.format must be given. With `format`, `base` (an
// unquantized HF checkpoint or a GGUF file) is quantized into a temporary directory that is
// removed once the result is mapped. The result's vocabulary is checked against `base`'s.
// Errors: neither or both given, an unknown format or group size, a base that is already
// quantized, a vocabulary that differs.
absl::StatusOr<std::unique_ptr<Model>> LoadDraftModel(const Model& base,
                                                      const DraftModelOptions& options);

// Whether `draft` tokenizes exactly as `target` does: same size and the same bytes for every
// token id. InvalidArgument naming the first difference otherwise (drafted ids would otherwise
// mean other text to the target: accepted rarely, and only by chance).
absl::Status CheckSameVocabulary(const Model& target, const Model& draft);

}  // namespace dq
