// A byte range of a string. Shared by the chat template (which reports where message content
// lies in a rendered prompt) and the tokenizer (which must not parse special tokens there), so
// that neither depends on the other.
#pragma once

#include <cstddef>

namespace dq {

// The bytes [begin, end) of some string.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;

  bool operator==(const TextRange&) const = default;
};

}  // namespace dq
