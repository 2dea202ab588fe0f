#include "engine/grammar/grammar_matcher.h"

#include <algorithm>
#include <utility>

namespace dq::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), arena_(grammar_->grammar()) {
  const Grammar& g = grammar_->grammar();
  Snapshot start;
  arena_.Close(arena_.Push(g.rule(g.root_rule()).start, -1), &start.stacks, &start.complete);
  std::sort(start.stacks.begin(), start.stacks.end());
  start.stacks.erase(std::unique(start.stacks.begin(), start.stacks.end()), start.stacks.end());
  history_.push_back(std::move(start));
}

// The arena points at the grammar the shared pointer keeps alive; a copy re-points its own.
GrammarMatcher::GrammarMatcher(const GrammarMatcher& other)
    : grammar_(other.grammar_), arena_(other.arena_), history_(other.history_) {}

GrammarMatcher& GrammarMatcher::operator=(const GrammarMatcher& other) {
  if (this != &other) {
    grammar_ = other.grammar_;
    arena_ = other.arena_;
    history_ = other.history_;
  }
  return *this;
}

bool GrammarMatcher::Walk(std::span<const int32_t> from, std::string_view bytes,
                          std::vector<int32_t>* out, bool* complete) {
  *complete = false;
  scratch_a_.assign(from.begin(), from.end());
  for (size_t i = 0; i < bytes.size(); ++i) {
    bool ended = false;
    arena_.Step(scratch_a_, static_cast<uint8_t>(bytes[i]), &scratch_b_, &ended);
    std::swap(scratch_a_, scratch_b_);
    if (i + 1 == bytes.size()) *complete = ended;
    if (scratch_a_.empty()) break;
  }
  *out = scratch_a_;
  return !out->empty() || *complete;
}

bool GrammarMatcher::AcceptBytes(std::string_view bytes) {
  const Snapshot& now = history_.back();
  if (now.terminated || bytes.empty()) return false;
  Snapshot next;
  if (!Walk(now.stacks, bytes, &next.stacks, &next.complete)) return false;
  history_.push_back(std::move(next));
  return true;
}

bool GrammarMatcher::AcceptToken(int32_t token) {
  const TokenVocabulary& v = grammar_->vocab();
  if (v.IsEos(token)) {
    if (!IsComplete() || IsTerminated()) return false;
    Snapshot end;
    end.terminated = true;
    history_.push_back(std::move(end));
    return true;
  }
  return AcceptBytes(BytesOf(token));
}

std::string_view GrammarMatcher::BytesOf(int32_t token) const {
  const TokenVocabulary& v = grammar_->vocab();
  if (history_.size() == 1 && !v.first_bytes().empty()) {
    const auto& first = v.first_bytes();
    auto it = std::lower_bound(first.begin(), first.end(), token,
                               [](const auto& f, int32_t id) { return f.first < id; });
    if (it != first.end() && it->first == token) return it->second;
  }
  return v.bytes(token);
}

void GrammarMatcher::FixFirstTokenBits(std::span<uint32_t> words) {
  if (history_.size() != 1) return;
  const size_t mark = arena_.Mark();
  std::vector<int32_t> out;
  for (const auto& [id, bytes] : grammar_->vocab().first_bytes()) {
    const uint32_t bit = 1u << (id % 32);
    words[static_cast<size_t>(id) / 32] &= ~bit;
    bool complete = false;
    if (!bytes.empty() && Walk(history_.back().stacks, bytes, &out, &complete)) {
      words[static_cast<size_t>(id) / 32] |= bit;
    }
  }
  arena_.Truncate(mark);
}

void GrammarMatcher::Rollback(int n) {
  n = std::clamp(n, 0, num_accepted());
  history_.resize(history_.size() - static_cast<size_t>(n));
}

bool GrammarMatcher::IsAllowed(int32_t token) {
  const TokenVocabulary& v = grammar_->vocab();
  if (IsTerminated()) return false;
  if (v.IsEos(token)) return IsComplete();
  const std::string_view bytes = BytesOf(token);
  if (bytes.empty()) return false;
  const size_t mark = arena_.Mark();
  std::vector<int32_t> out;
  bool complete = false;
  const bool ok = Walk(history_.back().stacks, bytes, &out, &complete);
  arena_.Truncate(mark);
  return ok;
}

void GrammarMatcher::FillNextTokenMask(std::span<uint32_t> words) {
  std::fill(words.begin(), words.end(), 0u);
  const Snapshot& now = history_.back();
  if (now.terminated) return;
  auto set = [&](int32_t id) { words[static_cast<size_t>(id) / 32] |= 1u << (id % 32); };
  auto test = [&](int32_t id) { return (words[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u; };
  const TokenVocabulary& v = grammar_->vocab();
  const size_t mark = arena_.Mark();
  std::vector<int32_t> out;
  for (int32_t stack : now.stacks) {
    const int32_t one[1] = {stack};
    const StateTokenMask& m = grammar_->mask(arena_.state(stack));
    const int32_t depth = arena_.depth(stack);
    if (depth > 1 && depth - 1 + m.max_depth > kMaxStackDepth) {
      // Near the depth cap the precomputed sets (built from a bottom frame) may allow a token
      // whose calls the cap drops here: walk every token instead (only absurd nestings pay).
      for (int32_t id : v.sorted_ids()) {
        bool complete = false;
        if (!test(id) && Walk(one, v.bytes(id), &out, &complete)) set(id);
      }
      continue;
    }
    for (size_t w = 0; w < m.accepted_bits.size(); ++w) words[w] |= m.accepted_bits[w];
    for (int32_t id : m.accepted_ids) set(id);
    for (int32_t id : m.dependent_ids) {
      if (test(id)) continue;
      bool complete = false;
      if (Walk(one, v.bytes(id), &out, &complete)) set(id);
    }
  }
  arena_.Truncate(mark);
  FixFirstTokenBits(words);
  if (now.complete) {
    for (int32_t id : v.eos_ids()) {
      if (id >= 0 && id < v.vocab_size()) set(id);
    }
  }
}

}  // namespace dq::grammar
