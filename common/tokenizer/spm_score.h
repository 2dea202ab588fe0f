// llama.cpp's SentencePiece tokenizer (llm_tokenizer_spm, GGUF tokenizer.ggml.model "llama"):
// the text's UTF-8 characters are merged pairwise while the concatenation of two neighbours is a
// token, the pair whose token has the highest score first (ties: the leftmost); a final symbol
// that is not a token becomes its bytes' <0xNN> tokens.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/tokenizer/bpe.h"

namespace dq::tok_internal {

class SpmScoreModel {
 public:
  // `scores` has one entry per token. Byte tokens are found by their "<0xNN>" text; a byte with
  // none becomes `unk_id` (or is dropped).
  static absl::StatusOr<SpmScoreModel> Build(const std::vector<std::string>& tokens,
                                             const std::vector<float>& scores,
                                             const std::vector<int32_t>& token_types,
                                             std::optional<int32_t> unk_id);

  // Appends the ids of `text` (valid UTF-8, spaces already "▁"). Thread-safe.
  void Encode(std::string_view text, std::vector<int32_t>* out) const;

 private:
  TokenIdMap token_to_id_;  // As llama.cpp: a repeated token text maps to its last id.
  std::vector<float> scores_;
  std::array<int32_t, 256> byte_ids_{};
};

}  // namespace dq::tok_internal
