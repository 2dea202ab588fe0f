#include "engine/grammar/grammar_cache.h"

#include <utility>

#include "engine/grammar/json_schema_compiler.h"

namespace dq::grammar {

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCache::JsonSchema(
    const std::string& schema) {
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(schema);
    if (it != entries_.end()) {
      order_.splice(order_.begin(), order_, it->second.at);
      return it->second.grammar;
    }
  }
  // Compiled outside the lock: another request's lookup need not wait for it.
  absl::StatusOr<Grammar> g = CompileJsonSchema(schema);
  if (!g.ok()) return g.status();
  std::shared_ptr<const CompiledGrammar> compiled = CompiledGrammar::Build(std::move(*g), vocab_);
  std::lock_guard lock(mu_);
  if (auto it = entries_.find(schema); it != entries_.end()) return it->second.grammar;
  order_.push_front(schema);
  entries_[schema] = {compiled, order_.begin()};
  while (entries_.size() > capacity_) {
    entries_.erase(order_.back());
    order_.pop_back();
  }
  return compiled;
}

size_t GrammarCache::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace dq::grammar
