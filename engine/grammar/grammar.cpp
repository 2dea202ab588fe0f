#include "engine/grammar/grammar.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dq::grammar {

int32_t GrammarBuilder::AddRule(std::string name) {
  const int32_t id = static_cast<int32_t>(g_.rules_.size());
  g_.rules_.push_back({std::move(name), -1});
  g_.rules_.back().start = NewState(id);
  return id;
}

int32_t GrammarBuilder::NewState(int32_t rule) {
  g_.states_.push_back({});
  g_.states_.back().rule = rule;
  return static_cast<int32_t>(g_.states_.size() - 1);
}

void GrammarBuilder::Eps(int32_t from, int32_t to) {
  if (from != to) g_.states_[static_cast<size_t>(from)].eps.push_back(to);
}

void GrammarBuilder::Bytes(int32_t from, uint8_t lo, uint8_t hi, int32_t to) {
  g_.states_[static_cast<size_t>(from)].bytes.push_back({lo, hi, to});
}

void GrammarBuilder::Call(int32_t from, int32_t rule, int32_t to) {
  g_.states_[static_cast<size_t>(from)].calls.push_back({rule, to});
}

void GrammarBuilder::Final(int32_t state) { g_.states_[static_cast<size_t>(state)].final = true; }

void GrammarBuilder::Literal(int32_t from, std::string_view text, int32_t to) {
  if (text.empty()) return Eps(from, to);
  int32_t at = from;
  for (size_t i = 0; i < text.size(); ++i) {
    const int32_t next = i + 1 == text.size() ? to : NewState(RuleOf(from));
    Byte(at, static_cast<uint8_t>(text[i]), next);
    at = next;
  }
}

void GrammarBuilder::RemoveEpsilons() {
  const size_t n = g_.states_.size();
  std::vector<GrammarState> out(n);
  std::vector<int32_t> stack;
  std::vector<uint32_t> seen(n, 0);
  for (size_t s = 0; s < n; ++s) {
    GrammarState& o = out[s];
    o.rule = g_.states_[s].rule;
    const uint32_t mark = static_cast<uint32_t>(s) + 1;
    stack.assign(1, static_cast<int32_t>(s));
    seen[s] = mark;
    while (!stack.empty()) {
      const GrammarState& e = g_.states_[static_cast<size_t>(stack.back())];
      stack.pop_back();
      o.final = o.final || e.final;
      o.bytes.insert(o.bytes.end(), e.bytes.begin(), e.bytes.end());
      o.calls.insert(o.calls.end(), e.calls.begin(), e.calls.end());
      for (int32_t t : e.eps) {
        if (seen[static_cast<size_t>(t)] != mark) {
          seen[static_cast<size_t>(t)] = mark;
          stack.push_back(t);
        }
      }
    }
  }
  g_.states_ = std::move(out);
}

namespace {

// States from which the rule can end, given which rules can end; fixpoint over both.
std::vector<bool> Productive(const std::vector<GrammarState>& states,
                             const std::vector<GrammarRule>& rules) {
  std::vector<bool> prod(states.size(), false);
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t s = 0; s < states.size(); ++s) {
      if (prod[s]) continue;
      const GrammarState& st = states[s];
      bool p = st.final;
      for (const ByteEdge& e : st.bytes) p = p || prod[static_cast<size_t>(e.target)];
      for (const CallEdge& c : st.calls) {
        p = p || (prod[static_cast<size_t>(rules[static_cast<size_t>(c.rule)].start)] &&
                  prod[static_cast<size_t>(c.ret)]);
      }
      if (p) prod[s] = changed = true;
    }
  }
  return prod;
}

}  // namespace

absl::Status GrammarBuilder::CheckRulesCanEnd() const {
  const std::vector<bool> prod = Productive(g_.states_, g_.rules_);
  if (!prod[static_cast<size_t>(g_.rules_[static_cast<size_t>(g_.root_)].start)]) {
    return absl::InvalidArgumentError(
        "the schema admits no finite JSON document (every branch recurses forever or is "
        "empty); check its $ref cycles, minItems and required properties");
  }
  return absl::OkStatus();
}

absl::StatusOr<Grammar> GrammarBuilder::Finish(int32_t root) && {
  g_.root_ = root;
  RemoveEpsilons();
  DQ_RETURN_IF_ERROR(CheckRulesCanEnd());
  // Drop edges into dead ends, so a matcher never walks into a state it cannot leave.
  const std::vector<bool> prod = Productive(g_.states_, g_.rules_);
  for (GrammarState& st : g_.states_) {
    std::erase_if(st.bytes,
                  [&](const ByteEdge& e) { return !prod[static_cast<size_t>(e.target)]; });
    std::erase_if(st.calls, [&](const CallEdge& c) {
      return !prod[static_cast<size_t>(g_.rules_[static_cast<size_t>(c.rule)].start)] ||
             !prod[static_cast<size_t>(c.ret)];
    });
  }
  ComputeFollow();
  return std::move(g_);
}

void GrammarBuilder::ComputeFollow() {
  auto& states = g_.states_;
  const size_t n = states.size();
  auto start = [&](int32_t r) {
    return static_cast<size_t>(g_.rules_[static_cast<size_t>(r)].start);
  };
  std::vector<bool> nullable(n, false);
  std::vector<ByteSet> first(n);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t s = 0; s < n; ++s) {
      const GrammarState& st = states[s];
      bool nul = st.final;
      ByteSet f = first[s];
      for (const ByteEdge& e : st.bytes) {
        for (int b = e.lo; b <= e.hi; ++b) f.set(static_cast<size_t>(b));
      }
      for (const CallEdge& c : st.calls) {
        f |= first[start(c.rule)];
        if (nullable[start(c.rule)]) {
          f |= first[static_cast<size_t>(c.ret)];
          nul = nul || nullable[static_cast<size_t>(c.ret)];
        }
      }
      if (nul != nullable[s] || f != first[s]) {
        nullable[s] = nul;
        first[s] = f;
        changed = true;
      }
    }
  }
  g_.follow_.assign(g_.rules_.size(), ByteSet());
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t s = 0; s < n; ++s) {
      for (const CallEdge& c : states[s].calls) {
        ByteSet f = g_.follow_[static_cast<size_t>(c.rule)] | first[static_cast<size_t>(c.ret)];
        if (nullable[static_cast<size_t>(c.ret)])
          f |= g_.follow_[static_cast<size_t>(states[s].rule)];
        if (f != g_.follow_[static_cast<size_t>(c.rule)]) {
          g_.follow_[static_cast<size_t>(c.rule)] = f;
          changed = true;
        }
      }
    }
  }
  // The states a match can rest on: reachable from the root with a byte edge.
  std::vector<bool> seen(n, false);
  std::vector<size_t> todo{start(g_.root_)};
  seen[todo[0]] = true;
  auto visit = [&](size_t t) {
    if (!seen[t]) {
      seen[t] = true;
      todo.push_back(t);
    }
  };
  while (!todo.empty()) {
    const size_t s = todo.back();
    todo.pop_back();
    if (!states[s].bytes.empty()) g_.byte_states_.push_back(static_cast<int32_t>(s));
    for (const ByteEdge& e : states[s].bytes) visit(static_cast<size_t>(e.target));
    for (const CallEdge& c : states[s].calls) {
      visit(start(c.rule));
      visit(static_cast<size_t>(c.ret));
    }
  }
  std::sort(g_.byte_states_.begin(), g_.byte_states_.end());
}

std::string Grammar::DebugString() const {
  std::string out;
  for (size_t r = 0; r < rules_.size(); ++r) {
    absl::StrAppend(&out, "rule ", r, " ", rules_[r].name, " start ", rules_[r].start, "\n");
  }
  for (size_t s = 0; s < states_.size(); ++s) {
    const GrammarState& st = states_[s];
    absl::StrAppend(&out, "s", s, " r", st.rule, st.final ? " final" : "", ":");
    for (const ByteEdge& e : st.bytes) {
      absl::StrAppend(&out, " [", static_cast<int>(e.lo), "-", static_cast<int>(e.hi), "]->s",
                      e.target);
    }
    for (const CallEdge& c : st.calls) absl::StrAppend(&out, " call r", c.rule, "->s", c.ret);
    out += "\n";
  }
  return out;
}

}  // namespace dq::grammar
