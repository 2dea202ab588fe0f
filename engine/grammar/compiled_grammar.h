// A grammar bound to a vocabulary, with XGrammar-style precomputed token masks: for every state a
// stack can rest on, each token is classified by walking the token trie from that state alone
// (the rest of the stack unknown):
//   accepted  - some path consumes the whole token inside the state's rule: valid in any context;
//   rejected  - every path fails inside the rule, or leaves it on a byte that can never follow
//               the rule (its follow set): invalid in any context;
//   dependent - a path leaves the rule before the token ends: only the real stack can tell.
// At run time a mask is the union of the accepted sets of the current stacks' top states, plus
// the dependent tokens that the real stacks accept (GrammarMatcher::FillNextTokenMask).
// Immutable once built; shared by every sequence using the same schema.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/token_vocabulary.h"

namespace dq::grammar {

struct StateTokenMask {
  // Accepted tokens as a bitset over the vocabulary (32-bit words) when many, else as ids.
  std::vector<uint32_t> accepted_bits;
  std::vector<int32_t> accepted_ids;
  std::vector<int32_t> dependent_ids;
  // The deepest stack the classification built from a bottom frame: on a stack deeper than
  // kMaxStackDepth - max_depth + 1 the depth cap may cut paths it took, so the matcher walks
  // every token there instead.
  int32_t max_depth = 0;
};

class CompiledGrammar {
 public:
  // Precomputes the masks of every reachable byte state.
  static std::shared_ptr<const CompiledGrammar> Build(Grammar grammar,
                                                      std::shared_ptr<const TokenVocabulary> vocab);

  const Grammar& grammar() const { return grammar_; }
  const TokenVocabulary& vocab() const { return *vocab_; }
  // Precondition: `state` has a byte edge and is reachable (Grammar::byte_states()).
  const StateTokenMask& mask(int32_t state) const {
    return masks_[static_cast<size_t>(state_slot_[static_cast<size_t>(state)])];
  }
  // Words of a vocab-sized bitset.
  int32_t mask_words() const { return (vocab_->vocab_size() + 31) / 32; }

  struct Stats {
    int64_t states = 0;
    int64_t accepted = 0;   // summed over states
    int64_t dependent = 0;  // summed over states
    double build_ms = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab)
      : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {}
  void Precompute();

  Grammar grammar_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  std::vector<int32_t> state_slot_;  // state -> index into masks_ (-1: not a byte state)
  std::vector<StateTokenMask> masks_;
  Stats stats_;
};

}  // namespace dq::grammar
