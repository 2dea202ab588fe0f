// The self-drafter ("quantize the target, quantize the drafter"): the target's own architecture
// run on cheaper weights (the same checkpoint quantized to int2/lut2, or any checkpoint with the
// target's vocabulary), with its own model runner, paged KV pool and block tables. It drafts
// greedily: each proposal is the drafter's argmax, a point mass, so the generator's "keep the
// draft iff the target's own draw equals it" rule applies and a seeded request gives the same
// tokens as plain decoding. (Sampling the draft from q with the general rejection rule accepts a
// little more at temperature > 0 but spends extra random draws, which breaks that equality.)
#pragma once

#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/model/model_runner.h"
#include "engine/spec/drafter.h"

namespace dq {

struct SelfDrafterOptions {
  int threads = 0;         // 0: one per hardware thread
  int kv_capacity = 0;     // tokens the drafter's KV pool holds in all; 0: min(context, 8192)
  int kv_block_size = 16;  // tokens per block of the drafter's pool
  BackendFactory backend;  // empty: the CPU backend
};

class SelfDrafter : public Drafter {
 public:
  // The drafter computes with `checkpoint` (weight-only), which must outlive it.
  static absl::StatusOr<std::unique_ptr<SelfDrafter>> Create(const Checkpoint& checkpoint,
                                                             const ModelConfig& config,
                                                             const SelfDrafterOptions& options);

  std::string_view name() const override { return "self"; }
  bool deterministic() const override { return true; }
  // The drafter's vocabulary must be the target's (same size; the caller compares the tokens
  // themselves when it has both tokenizers, see CheckSameVocabulary).
  absl::Status CheckTarget(const ModelConfig& target) const override;

  // Prefills the prompt into the drafter's own KV cache.
  absl::Status Begin(uint64_t sequence, std::span<const int32_t> prompt) override;
  // Begin for a prompt whose K/V the drafter's own weights computed elsewhere (a prefill
  // worker, docs/speculative.md): takes the blocks and lets `fill` write them (the sequence's
  // blocks, token order) instead of running the forward pass. A prompt the drafter cannot hold
  // is no error, as in Begin; a `fill` error leaves the sequence without a cache.
  absl::Status BeginWithKv(uint64_t sequence, std::span<const int32_t> prompt,
                           const std::function<absl::Status(const KvSequence&)>& fill);
  void End(uint64_t sequence) override;
  // Catches each sequence's cache up with its history (the tokens the target emitted since the
  // last draft, in one item), then extends it greedily one token per forward, all sequences in
  // one batch. A sequence whose drafter KV does not fit gets no draft (plain decoding).
  absl::Status Propose(std::span<const DraftRequest> requests, std::span<Draft> drafts) override;
  // Drops the cached draft tokens past the accepted ones, freeing their blocks.
  void Accept(uint64_t sequence, int accepted) override;

  const ModelConfig& config() const { return runner_->config(); }
  KvBlockPool& kv_pool() { return runner_->kv_pool(); }
  // The drafter's runner (a worker stages KV into its cache through it).
  ModelRunner& runner() { return *runner_; }
  // The tokens whose K/V the drafter holds for `sequence`, in order (empty when unknown).
  std::span<const int32_t> cached_tokens(uint64_t sequence) const;

 private:
  struct State {
    KvSequence kv;
    std::vector<int32_t> tokens;  // what kv holds: tokens[i] at position i
    size_t history_size = 0;      // the last proposal's history length (Accept's base)
    bool proposed = false;        // drafted in the last Propose (Accept applies)
  };
  // One sequence's work in a Propose call.
  struct Pending {
    State* state = nullptr;
    size_t request = 0;
    int want = 0;               // tokens to propose
    std::vector<int32_t> feed;  // this round's input tokens
  };

  explicit SelfDrafter(std::unique_ptr<ModelRunner> runner) : runner_(std::move(runner)) {}
  // Rolls `s` back to its longest prefix shared with `history` (keeping at least the last
  // history token uncached, so that it is fed) and reserves room for `want` drafted tokens.
  // Returns how many tokens it may draft (0 when the KV does not fit).
  int Prepare(State& s, std::span<const int32_t> history, int want);
  void Truncate(State& s, size_t tokens);
  // Feeds every pending sequence's `feed`, appends each one's argmax to its draft.
  absl::Status Round(std::vector<Pending>& pending, std::span<Draft> drafts);

  std::unique_ptr<ModelRunner> runner_;
  std::unordered_map<uint64_t, State> states_;
};

}  // namespace dq
