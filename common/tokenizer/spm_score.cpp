#include "common/tokenizer/spm_score.h"

#include <queue>

namespace dq::tok_internal {
namespace {

struct Symbol {
  size_t begin;
  size_t len;  // 0: merged into its left neighbour.
  int32_t prev;
  int32_t next;
};

struct Bigram {
  int32_t left;
  int32_t right;
  float score;
  size_t size;
};

// llama.cpp's llm_bigram_spm::comparator: the highest score on top, then the leftmost.
struct BigramLess {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

size_t Utf8Len(uint8_t lead) {
  static constexpr size_t kLookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLookup[lead >> 4];
}

}  // namespace

absl::StatusOr<SpmScoreModel> SpmScoreModel::Build(const std::vector<std::string>& tokens,
                                                   const std::vector<float>& scores,
                                                   const std::vector<int32_t>& token_types,
                                                   std::optional<int32_t> unk_id) {
  if (scores.size() != tokens.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SentencePiece vocabulary has %d scores for %d tokens; they must be the same length "
        "(GGUF tokenizer.ggml.scores)",
        scores.size(), tokens.size()));
  }
  SpmScoreModel model;
  model.scores_ = scores;
  model.token_to_id_.reserve(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) {
    model.token_to_id_[tokens[id]] = static_cast<int32_t>(id);
  }
  (void)token_types;
  for (int b = 0; b < 256; ++b) {
    auto it = model.token_to_id_.find(absl::StrFormat("<0x%02X>", b));
    if (it == model.token_to_id_.end()) it = model.token_to_id_.find(std::string(1, char(b)));
    model.byte_ids_[b] = it != model.token_to_id_.end() ? it->second : unk_id.value_or(-1);
  }
  return model;
}

void SpmScoreModel::Encode(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  std::vector<Symbol> syms;
  for (size_t at = 0; at < text.size();) {
    const size_t len = std::min(Utf8Len(static_cast<uint8_t>(text[at])), text.size() - at);
    const auto n = static_cast<int32_t>(syms.size());
    syms.push_back({at, len, n - 1, at + len == text.size() ? -1 : n + 1});
    at += len;
  }
  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const std::string_view pair = text.substr(syms[left].begin, syms[left].len + syms[right].len);
    auto it = token_to_id_.find(pair);
    if (it == token_to_id_.end()) return;
    queue.push({left, right, scores_[it->second], pair.size()});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Bigram top = queue.top();
    queue.pop();
    Symbol& left = syms[top.left];
    Symbol& right = syms[top.right];
    if (left.len == 0 || right.len == 0 || left.len + right.len != top.size) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = top.left;
    try_add(left.prev, top.left);
    try_add(top.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    const std::string_view piece = text.substr(syms[i].begin, syms[i].len);
    if (auto it = token_to_id_.find(piece); it != token_to_id_.end()) {
      out->push_back(it->second);
      continue;
    }
    for (char c : piece) {
      const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
      if (id >= 0) out->push_back(id);
    }
  }
}

}  // namespace dq::tok_internal
