// A byte-level grammar: a set of rules, each a finite automaton over bytes whose edges may also
// call another rule (push its start, continue at the edge's target once it ends). Matching it is
// a pushdown automaton (grammar_matcher.h). Built with epsilon edges (GrammarBuilder), which
// Finish() removes, so every state of a finished Grammar consumes a byte, calls a rule or is
// final.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace dq::grammar {

struct ByteEdge {
  uint8_t lo = 0;
  uint8_t hi = 0;  // inclusive
  int32_t target = -1;
};

struct CallEdge {
  int32_t rule = -1;
  int32_t ret = -1;  // where the caller continues once `rule` ends
};

struct GrammarState {
  int32_t rule = -1;
  bool final = false;  // the rule may end here
  std::vector<ByteEdge> bytes;
  std::vector<CallEdge> calls;
  std::vector<int32_t> eps;  // builder only; empty in a finished Grammar
};

struct GrammarRule {
  std::string name;
  int32_t start = -1;
};

using ByteSet = std::bitset<256>;

class Grammar {
 public:
  int32_t num_states() const { return static_cast<int32_t>(states_.size()); }
  int32_t num_rules() const { return static_cast<int32_t>(rules_.size()); }
  const GrammarState& state(int32_t s) const { return states_[static_cast<size_t>(s)]; }
  const GrammarRule& rule(int32_t r) const { return rules_[static_cast<size_t>(r)]; }
  int32_t root_rule() const { return root_; }
  // Bytes that can come right after `rule` ends, in any context (a superset).
  const ByteSet& follow(int32_t rule) const { return follow_[static_cast<size_t>(rule)]; }
  // States with at least one byte edge (the ones a matcher's stacks rest on).
  const std::vector<int32_t>& byte_states() const { return byte_states_; }
  // Human-readable dump for tests and debugging.
  std::string DebugString() const;

 private:
  friend class GrammarBuilder;
  std::vector<GrammarState> states_;
  std::vector<GrammarRule> rules_;
  std::vector<ByteSet> follow_;
  std::vector<int32_t> byte_states_;
  int32_t root_ = -1;
};

// Builds a Grammar. Fragments are wired between existing states: Literal(a, "ab", b) adds
// a -a-> x -b-> b. Epsilon edges make alternatives and optional parts easy to write.
class GrammarBuilder {
 public:
  // A new rule with a fresh start state; returns the rule id.
  int32_t AddRule(std::string name);
  int32_t Start(int32_t rule) const { return g_.rules_[static_cast<size_t>(rule)].start; }
  int32_t NewState(int32_t rule);
  int32_t RuleOf(int32_t state) const { return g_.states_[static_cast<size_t>(state)].rule; }
  void Eps(int32_t from, int32_t to);
  void Bytes(int32_t from, uint8_t lo, uint8_t hi, int32_t to);
  void Byte(int32_t from, uint8_t b, int32_t to) { Bytes(from, b, b, to); }
  void Call(int32_t from, int32_t rule, int32_t to);
  void Final(int32_t state);
  // The bytes of `text` in sequence from `from` to `to` (an epsilon edge when empty).
  void Literal(int32_t from, std::string_view text, int32_t to);

  // Removes epsilon edges, checks every rule can end, computes the follow sets. `root` is the
  // document's rule. Errors: InvalidArgument when a rule can never finish (a schema that
  // describes no finite document).
  absl::StatusOr<Grammar> Finish(int32_t root) &&;

 private:
  void RemoveEpsilons();
  absl::Status CheckRulesCanEnd() const;
  void ComputeFollow();

  Grammar g_;
};

}  // namespace dq::grammar
