#include "common/tokenizer/incremental_detokenizer.h"

#include <utility>

#include "common/tokenizer/utf8.h"

namespace dq {

IncrementalDetokenizer::IncrementalDetokenizer(Tokenizer tokenizer, bool skip_special)
    : tokenizer_(std::move(tokenizer)), skip_special_(skip_special) {}

std::string IncrementalDetokenizer::Next(int32_t id) {
  if (skip_special_ && tokenizer_.IsSpecial(id)) return {};
  const std::string_view bytes = tokenizer_.TokenBytes(id);
  if (bytes.empty()) return {};
  pending_.append(bytes);
  const size_t keep = tok_internal::IncompleteUtf8TailLen(pending_);
  std::string text;
  tok_internal::AppendUtf8Lossy(std::string_view(pending_).substr(0, pending_.size() - keep),
                                &text);
  pending_.erase(0, pending_.size() - keep);
  return text;
}

std::string IncrementalDetokenizer::Flush() {
  std::string text;
  tok_internal::AppendUtf8Lossy(pending_, &text);
  pending_.clear();
  return text;
}

}  // namespace dq
