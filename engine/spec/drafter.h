// The drafter interface of speculative decoding: something cheap that guesses the next few
// tokens of each sequence, which the target model then verifies in one forward pass. Drafters:
// NgramDrafter (prompt lookup, no weights), SelfDrafter (the target's architecture on lower-bit
// weights, with its own KV cache), DFlashDrafter (a block-diffusion drafter conditioned on the
// target's hidden states).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/model/model_config.h"

namespace dq {

// What a drafter is asked for one sequence in one step.
struct DraftRequest {
  uint64_t sequence = 0;             // the caller's id for the sequence, stable over its life
  std::span<const int32_t> history;  // prompt + generated tokens; the last is the target's input
  int max_tokens = 0;                // propose at most this many (may be 0: propose nothing)
};

// A drafter's guess for one sequence: the tokens that follow `history`, in order.
struct Draft {
  std::vector<int32_t> tokens;
  // The drafter's distribution q at each proposed position (tokens.size() rows of vocab_size
  // probabilities), needed by the rejection-sampling rule. Empty when the drafter is
  // deterministic: q is then a point mass on each proposed token.
  std::vector<float> probs;
};

class Drafter {
 public:
  virtual ~Drafter() = default;

  // "ngram", "self", "dflash".
  virtual std::string_view name() const = 0;
  // Whether every proposal is a point mass (Draft::probs stays empty).
  virtual bool deterministic() const = 0;

  // Start-up check that this drafter can serve `target` (vocabulary, layout); an error names the
  // mismatch. A generator refuses to run with a drafter that fails it (never wrong tokens).
  virtual absl::Status CheckTarget(const ModelConfig& target) const = 0;

  // A sequence starts (after its prompt was prefilled on the target) / ends (any reason).
  virtual absl::Status Begin(uint64_t /*sequence*/, std::span<const int32_t> /*prompt*/) {
    return absl::OkStatus();
  }
  virtual void End(uint64_t /*sequence*/) {}

  // One draft per request, drafts[i] for requests[i] (drafts.size() == requests.size()). A
  // drafter may propose fewer than max_tokens, or none.
  virtual absl::Status Propose(std::span<const DraftRequest> requests, std::span<Draft> drafts) = 0;

  // The target kept the first `accepted` tokens of `sequence`'s last draft: a drafter with state
  // (its own KV cache) rolls back what it computed for the rest.
  virtual void Accept(uint64_t /*sequence*/, int /*accepted*/) {}

  // The longest draft this drafter can make in one step; a caller whose k is larger refuses to
  // start (DFlash: its block size - 1).
  virtual int max_draft_tokens() const { return kMaxDraftTokens; }
  static constexpr int kMaxDraftTokens = 1 << 20;

  // Drafters conditioned on the target's hidden states name the target layers whose outputs
  // they read (0-based; empty: none). The caller captures those layers in every target forward
  // (ForwardHooks::on_layer_output) and hands over the rows of the tokens the sequence keeps.
  virtual std::span<const int> target_layers() const { return {}; }
  // `features`: for `count` consecutive kept tokens of `sequence` starting at position `first`
  // (the prompt's after prefill; next_token and the accepted draft after a verify step), each
  // token's target_layers() outputs concatenated in that order ([count, layers * hidden]).
  virtual void ObserveTarget(uint64_t /*sequence*/, int /*first*/, int /*count*/,
                             std::span<const float> /*features*/) {}
};

}  // namespace dq
