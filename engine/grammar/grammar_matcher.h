// One sequence's position in a compiled grammar: accepts tokens (or raw bytes) incrementally,
// says whether the output so far is a complete document, fills the next token's mask, and rolls
// back accepted tokens (a rejected speculative draft). Copyable (a copy continues on its own);
// not thread-safe; the CompiledGrammar it reads is shared.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/stack_arena.h"

namespace dq::grammar {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);
  GrammarMatcher(const GrammarMatcher& other);
  GrammarMatcher& operator=(const GrammarMatcher& other);

  // Advances by one token. False (and nothing changes) when the grammar does not allow it
  // here. An EOS token is allowed only once the document is complete; after it nothing is.
  // The first token counts with the bytes it writes as the first (TokenVocabulary::first_bytes).
  bool AcceptToken(int32_t token);
  // Advances by raw bytes (one history entry, as one token would be). False: not allowed.
  bool AcceptBytes(std::string_view bytes);
  // Undoes the last `n` accepted tokens (or AcceptBytes calls); at most num_accepted().
  void Rollback(int n);
  int num_accepted() const { return static_cast<int>(history_.size()) - 1; }

  // The input so far is a complete document (EOS would be accepted).
  bool IsComplete() const { return history_.back().complete; }
  // More bytes could follow (false after EOS or once a document can only end).
  bool CanContinue() const { return !history_.back().stacks.empty(); }
  bool IsTerminated() const { return history_.back().terminated; }

  // Writes the next token's mask: bit i of words[i / 32] set iff token i is allowed. `words`
  // must hold CompiledGrammar::mask_words(). Ids past the tokenizer's are never allowed.
  void FillNextTokenMask(std::span<uint32_t> words);
  // Whether `token` is allowed next (the matcher walk alone, no precomputed masks: the
  // reference the masks are tested against).
  bool IsAllowed(int32_t token);

  const CompiledGrammar& compiled() const { return *grammar_; }

 private:
  struct Snapshot {
    std::vector<int32_t> stacks;  // sorted stack ids resting on byte edges
    bool complete = false;
    bool terminated = false;
  };
  // What `token` writes here: its first-token bytes before anything was accepted.
  std::string_view BytesOf(int32_t token) const;
  // Before the first token, the ids that write other bytes there get their bits from a walk.
  void FixFirstTokenBits(std::span<uint32_t> words);
  // Walks `bytes` from `from`; the stacks after, and whether the document ends right there.
  bool Walk(std::span<const int32_t> from, std::string_view bytes, std::vector<int32_t>* out,
            bool* complete);

  std::shared_ptr<const CompiledGrammar> grammar_;
  StackArena arena_;
  std::vector<Snapshot> history_;  // [0]: the start; back(): now
  std::vector<int32_t> scratch_a_, scratch_b_;
};

}  // namespace dq::grammar
