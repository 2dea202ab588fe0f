// Compiled grammars by source: a worker compiles a request's JSON schema once (the mask
// precomputation costs milliseconds to a few hundred) and every later request with the same
// schema shares it. Thread-safe.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/token_vocabulary.h"

namespace dq::grammar {

class GrammarCache {
 public:
  explicit GrammarCache(std::shared_ptr<const TokenVocabulary> vocab, size_t capacity = 64)
      : vocab_(std::move(vocab)), capacity_(capacity) {}

  // The compiled grammar of a JSON schema (text); InvalidArgument for a schema the compiler
  // refuses (json_schema_compiler.h). The least recently used entry beyond `capacity` goes.
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> JsonSchema(const std::string& schema);

  const TokenVocabulary& vocab() const { return *vocab_; }
  size_t size() const;

 private:
  std::shared_ptr<const TokenVocabulary> vocab_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::string> order_;  // most recently used first
  struct Entry {
    std::shared_ptr<const CompiledGrammar> grammar;
    std::list<std::string>::iterator at;
  };
  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace dq::grammar
