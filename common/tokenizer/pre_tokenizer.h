// Regex pre-tokenization (PCRE2, UTF + UCP, JIT when available): splits text into the pieces
// BPE runs on. A chain of regexes is applied in order; each splits every current piece into
// its matches and the text between them ("Isolated" behaviour in HF tokenizers' terms).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace dq::tok_internal {

// HF ByteLevel's GPT-2 regex (use_regex=true).
inline constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// HF Digits(individual_digits=true); Digits(false) is `\p{N}+`.
inline constexpr std::string_view kDigitRegex = R"(\p{N})";
inline constexpr std::string_view kDigitsRegex = R"(\p{N}+)";
inline constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

class CompiledRegex;

class RegexChain {
 public:
  // Compiles every pattern once. The error names the pattern and PCRE2's complaint.
  static absl::StatusOr<RegexChain> Compile(const std::vector<std::string>& patterns);

  // Appends the pieces of `text` (valid UTF-8) to *out, in order; they tile `text` exactly.
  // Thread-safe.
  void Split(std::string_view text, std::vector<std::string_view>* out) const;

  const std::vector<std::string>& patterns() const { return patterns_; }

 private:
  std::vector<std::string> patterns_;
  std::vector<std::shared_ptr<const CompiledRegex>> regexes_;
};

}  // namespace dq::tok_internal
