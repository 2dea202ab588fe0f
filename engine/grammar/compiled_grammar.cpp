#include "engine/grammar/compiled_grammar.h"

#include <chrono>
#include <utility>

#include "engine/grammar/stack_arena.h"

namespace dq::grammar {
namespace {

enum : uint8_t { kRejected = 0, kDependent = 1, kAccepted = 2 };

// Classifies every token for one start state at a time by a depth-first walk of the trie.
class MaskBuilder {
 public:
  MaskBuilder(const Grammar& g, const TokenVocabulary& v)
      : g_(g), v_(v), arena_(g), status_(v.sorted_ids().size()) {}

  StateTokenMask Build(int32_t state) {
    arena_.Clear();
    std::fill(status_.begin(), status_.end(), kRejected);
    follow_ = &g_.follow(g_.state(state).rule);
    const int32_t base = arena_.Push(state, -1);
    sets_.resize(1);
    sets_[0].assign(1, base);
    Walk(0, 0);
    StateTokenMask m = Collect();
    m.max_depth = arena_.max_depth();
    return m;
  }

 private:
  void Walk(int32_t trie_node, size_t depth) {
    const auto& trie = v_.trie();
    const TokenVocabulary::TrieNode& t = trie[static_cast<size_t>(trie_node)];
    if (sets_.size() < depth + 2) sets_.resize(depth + 2);
    for (int32_t c = t.first_child; c >= 0 && c < t.first_child + t.num_children; ++c) {
      const TokenVocabulary::TrieNode& child = trie[static_cast<size_t>(c)];
      bool ended = false;
      arena_.Step(sets_[depth], child.byte, &sets_[depth + 1], &ended);
      if (ended) MarkDependentBelow(child);
      if (ended || !sets_[depth + 1].empty()) {
        for (int32_t i = child.tokens_begin; i < child.tokens_end; ++i) status_[i] = kAccepted;
      }
      if (!sets_[depth + 1].empty() && child.num_children > 0) Walk(c, depth + 1);
    }
  }

  // The rule ended after `node`'s bytes: longer tokens continue in the caller's context, if
  // their next byte can follow the rule at all.
  void MarkDependentBelow(const TokenVocabulary::TrieNode& node) {
    const auto& trie = v_.trie();
    for (int32_t c = node.first_child; c >= 0 && c < node.first_child + node.num_children; ++c) {
      const TokenVocabulary::TrieNode& child = trie[static_cast<size_t>(c)];
      if (!follow_->test(child.byte)) continue;
      for (int32_t i = child.subtree_begin; i < child.subtree_end; ++i) {
        if (status_[i] == kRejected) status_[i] = kDependent;
      }
    }
  }

  StateTokenMask Collect() const {
    StateTokenMask m;
    const auto ids = v_.sorted_ids();
    size_t accepted = 0;
    for (uint8_t s : status_) accepted += s == kAccepted;
    const size_t words = static_cast<size_t>((v_.vocab_size() + 31) / 32);
    const bool dense = accepted > words;
    if (dense) m.accepted_bits.assign(words, 0);
    for (size_t i = 0; i < status_.size(); ++i) {
      const int32_t id = ids[i];
      if (status_[i] == kAccepted) {
        if (dense) {
          m.accepted_bits[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
        } else {
          m.accepted_ids.push_back(id);
        }
      } else if (status_[i] == kDependent) {
        m.dependent_ids.push_back(id);
      }
    }
    return m;
  }

  const Grammar& g_;
  const TokenVocabulary& v_;
  StackArena arena_;
  std::vector<uint8_t> status_;  // by position in sorted_ids()
  std::vector<std::vector<int32_t>> sets_;
  const ByteSet* follow_ = nullptr;
};

}  // namespace

std::shared_ptr<const CompiledGrammar> CompiledGrammar::Build(
    Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab) {
  std::shared_ptr<CompiledGrammar> g(new CompiledGrammar(std::move(grammar), std::move(vocab)));
  g->Precompute();
  return g;
}

void CompiledGrammar::Precompute() {
  const auto t0 = std::chrono::steady_clock::now();
  state_slot_.assign(static_cast<size_t>(grammar_.num_states()), -1);
  MaskBuilder builder(grammar_, *vocab_);
  for (int32_t s : grammar_.byte_states()) {
    state_slot_[static_cast<size_t>(s)] = static_cast<int32_t>(masks_.size());
    masks_.push_back(builder.Build(s));
    const StateTokenMask& m = masks_.back();
    int64_t accepted = static_cast<int64_t>(m.accepted_ids.size());
    for (uint32_t w : m.accepted_bits) accepted += __builtin_popcount(w);
    stats_.accepted += accepted;
    stats_.dependent += static_cast<int64_t>(m.dependent_ids.size());
  }
  stats_.states = static_cast<int64_t>(masks_.size());
  stats_.build_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace dq::grammar
