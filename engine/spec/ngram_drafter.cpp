#include "engine/spec/ngram_drafter.h"

#include <algorithm>

namespace dq {

absl::Status NgramDrafter::CheckTarget(const ModelConfig& /*target*/) const {
  if (options_.min_ngram < 1 || options_.max_ngram < options_.min_ngram) {
    return absl::InvalidArgumentError(
        absl::StrCat("n-gram drafter: need 1 <= min_ngram <= max_ngram, got min_ngram ",
                     options_.min_ngram, ", max_ngram ", options_.max_ngram));
  }
  return absl::OkStatus();
}

std::vector<int32_t> NgramDrafter::Lookup(std::span<const int32_t> history, int max_tokens) const {
  const int64_t size = static_cast<int64_t>(history.size());
  if (max_tokens <= 0) return {};
  for (int64_t n = std::min<int64_t>(options_.max_ngram, size - 1); n >= options_.min_ngram; --n) {
    const auto suffix = history.subspan(size - n);
    // Most recent match first: the nearest context is the likeliest to repeat. A match must be
    // followed by at least one token, so it starts at most at size - n - 1.
    for (int64_t start = size - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), history.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t count = std::min<int64_t>(max_tokens, size - from);
      return std::vector<int32_t>(history.begin() + from, history.begin() + from + count);
    }
  }
  return {};
}

absl::Status NgramDrafter::Propose(std::span<const DraftRequest> requests,
                                   std::span<Draft> drafts) {
  if (drafts.size() != requests.size()) {
    return absl::InvalidArgumentError(absl::StrCat("n-gram drafter: ", requests.size(),
                                                   " requests but ", drafts.size(), " drafts"));
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    drafts[i].tokens = Lookup(requests[i].history, requests[i].max_tokens);
    drafts[i].probs.clear();
  }
  return absl::OkStatus();
}

}  // namespace dq
