#include "common/tokenizer/incremental_detokenizer.h"

#include <algorithm>
#include <utility>

#include "common/tokenizer/utf8.h"

namespace dq {

IncrementalDetokenizer::IncrementalDetokenizer(Tokenizer tokenizer, bool skip_special,
                                               std::vector<int32_t> keep_special)
    : tokenizer_(std::move(tokenizer)),
      skip_special_(skip_special),
      keep_special_(std::move(keep_special)) {
  Reset();
}

void IncrementalDetokenizer::Reset() {
  pending_.clear();
  first_ = true;
  strip_left_ = tokenizer_.strip_start();
}

void IncrementalDetokenizer::ApplyStrip(std::string* text) {
  const std::string_view content = tokenizer_.strip_content();
  if (strip_left_ <= 0 || content.empty()) return;
  size_t cut = 0;
  while (strip_left_ > 0 && std::string_view(*text).substr(cut, content.size()) == content) {
    cut += content.size();
    --strip_left_;
  }
  if (cut < text->size()) strip_left_ = 0;
  text->erase(0, cut);
}

std::string IncrementalDetokenizer::Next(int32_t id) {
  if (id < 0 || id >= tokenizer_.vocab_size()) return {};
  if (skip_special_ && tokenizer_.IsSpecial(id) &&
      std::find(keep_special_.begin(), keep_special_.end(), id) == keep_special_.end()) {
    return {};
  }
  const std::string_view bytes =
      first_ ? tokenizer_.FirstTokenBytes(id) : tokenizer_.TokenBytes(id);
  first_ = false;
  if (bytes.empty()) return {};
  pending_.append(bytes);
  const size_t keep = tok_internal::IncompleteUtf8TailLen(pending_);
  std::string text;
  tok_internal::AppendUtf8Lossy(std::string_view(pending_).substr(0, pending_.size() - keep),
                                &text);
  pending_.erase(0, pending_.size() - keep);
  ApplyStrip(&text);
  return text;
}

std::string IncrementalDetokenizer::Flush() {
  std::string text;
  tok_internal::AppendUtf8Lossy(pending_, &text);
  ApplyStrip(&text);
  Reset();
  return text;
}

}  // namespace dq
