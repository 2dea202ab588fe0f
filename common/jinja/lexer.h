// Splits template source into tokens the way jinja2's lexer does for transformers' environment
// (trim_blocks and lstrip_blocks on, keep_trailing_newline off): template data, tag delimiters
// and the expression tokens inside tags, with whitespace control (`{%-`, `-%}`, `{%+`, `+%}`)
// already applied to the data.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace dq::jinja {

struct Token {
  enum class Type {
    kData,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,  // `text` is the unescaped value
    kInt,
    kFloat,
    kOp,
    kEof,
  };
  Type type;
  std::string text;
  int line = 1;
  int col = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source, const LexOptions& opts);

}  // namespace dq::jinja
