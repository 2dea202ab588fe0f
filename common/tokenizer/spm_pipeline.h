// The SentencePiece-style text pipeline of HF tokenizers: normalizers (NFC, Replace, Prepend),
// pre-tokenizers (Metaspace, regex Split) and the decoder chain (Replace, ByteFallback, Fuse,
// Strip, Metaspace), step for step as the `tokenizers` library computes them.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/tokenizer/pre_tokenizer.h"
#include "common/tokenizer/tokenizer.h"

namespace dq::tok_internal {

// `text` (valid UTF-8) after every step, in order.
std::string Normalize(std::span<const NormalizerStep> steps, std::string_view text);

class SpmPreTokenizer {
 public:
  static absl::StatusOr<SpmPreTokenizer> Build(std::vector<PreTokenizerStep> steps);

  // Appends the pieces of normalized `text` to *out. `at_start`: the text begins the input (for
  // Metaspace prepend_scheme "first"). No steps: `text` is one piece (if non-empty).
  void Split(std::string_view text, bool at_start, std::vector<std::string>* out) const;

 private:
  struct Step {
    PreTokenizerStep spec;
    std::shared_ptr<const RegexChain> regex;  // kRegex.
  };
  std::vector<Step> steps_;
};

class SpmDecoder {
 public:
  // Checks the steps (a Strip's content is one character; Replace's pattern is non-empty).
  static absl::StatusOr<SpmDecoder> Build(std::vector<DecoderStep> steps);

  // HF's decoder.decode(tokens): every step on the token strings in turn, then joined.
  std::string Decode(std::vector<std::string> tokens) const;

  // What `token` contributes when streamed one token at a time: the steps before Fuse on it
  // alone (at position 0 when `first`, else 1), with ByteFallback giving the raw byte; Replace
  // after Fuse too. Strip after Fuse is left to the stream (strip_start).
  std::string StreamBytes(std::string_view token, bool first) const;

  int strip_start() const { return strip_start_; }
  const std::string& strip_content() const { return strip_content_; }

 private:
  std::vector<DecoderStep> steps_;
  int strip_start_ = 0;
  std::string strip_content_;
};

// "<0xNN>" (hex digits either case) -> NN, else -1 (HF's ByteFallback test).
int ByteFallbackValue(std::string_view token);

}  // namespace dq::tok_internal
