#include "engine/sampler/stop_checker.h"

#include <algorithm>
#include <utility>

namespace dq {
namespace {

// Bytes at the end of `s` that form the start of a UTF-8 character still missing bytes.
// Invalid bytes are not held (they would never complete).
size_t IncompleteUtf8Tail(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(n, 4); ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: keep looking for the lead
    size_t len = 1;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
    }
    return len > back ? back : 0;
  }
  return 0;
}

}  // namespace

StopChecker::StopChecker(std::vector<std::string> stop_strings, int min_tokens)
    : min_tokens_(min_tokens) {
  for (auto& s : stop_strings) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

size_t StopChecker::LongestPartialMatch() const {
  size_t best = 0;
  for (const std::string& s : stops_) {
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > best; --k) {
      if (std::string_view(pending_).substr(pending_.size() - k) ==
          std::string_view(s).substr(0, k)) {
        best = k;
        break;
      }
    }
  }
  return best;
}

StopChecker::Result StopChecker::Feed(std::string_view piece) {
  Result result;
  if (stopped_) {
    result.stopped = true;
    return result;
  }
  pending_.append(piece);
  // Before min_tokens pieces a stop string is text: only a tail that may still grow into one
  // (ending at or after the min_tokens-th piece) is held back.
  if (++fed_ < min_tokens_) {
    Result r = Emit();
    early_ = pending_.size();
    return r;
  }
  // The match that completes first (as if the text had come one byte at a time); among those
  // ending at the same byte, the one starting first. Earlier text was searched on earlier calls,
  // and no match can start in text already emitted (such a tail would have been held back).
  size_t best_end = std::string::npos;
  size_t best_start = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& s : stops_) {
    // A match must end past the text of the pieces before min_tokens.
    const size_t pos = pending_.find(s, early_ + 1 > s.size() ? early_ + 1 - s.size() : 0);
    if (pos == std::string::npos) continue;
    const size_t end = pos + s.size();
    if (end < best_end || (end == best_end && pos < best_start)) {
      best_end = end;
      best_start = pos;
      best = &s;
    }
  }
  if (best != nullptr) {
    stopped_ = true;
    result.stopped = true;
    result.matched = *best;
    result.text = pending_.substr(0, best_start);
    pending_.clear();
    return result;
  }
  return Emit();
}

StopChecker::Result StopChecker::Emit() {
  Result result;
  const size_t hold = std::max(LongestPartialMatch(), IncompleteUtf8Tail(pending_));
  const size_t emit = pending_.size() - hold;
  result.text = pending_.substr(0, emit);
  pending_.erase(0, emit);
  early_ -= std::min(early_, emit);
  return result;
}

std::string StopChecker::Flush() {
  if (stopped_) return "";
  return std::exchange(pending_, std::string());
}

}  // namespace dq
