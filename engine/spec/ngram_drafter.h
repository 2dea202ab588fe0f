// Prompt-lookup drafting: find the most recent earlier occurrence of the sequence's last n
// tokens (n = max_ngram down to min_ngram) in its own history, prompt included, and propose the
// tokens that followed it. No weights; strong on inputs that the answer copies or repeats (code
// edits, extraction, summaries that quote, repetitive text).
#pragma once

#include "engine/spec/drafter.h"

namespace dq {

struct NgramDrafterOptions {
  int max_ngram = 3;  // longest suffix to match; longer matches predict better
  int min_ngram = 1;  // shortest suffix tried when no longer one matches
};

class NgramDrafter : public Drafter {
 public:
  explicit NgramDrafter(const NgramDrafterOptions& options = {}) : options_(options) {}

  std::string_view name() const override { return "ngram"; }
  bool deterministic() const override { return true; }
  // Proposes only tokens already in the history, so any target fits; checks the options.
  absl::Status CheckTarget(const ModelConfig& target) const override;
  absl::Status Propose(std::span<const DraftRequest> requests, std::span<Draft> drafts) override;

  // The proposal for one history (at most max_tokens tokens).
  std::vector<int32_t> Lookup(std::span<const int32_t> history, int max_tokens) const;

 private:
  NgramDrafterOptions options_;
};

}  // namespace dq
