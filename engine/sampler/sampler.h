// Token sampling for one sequence: penalties, temperature, top-k, top-p, min-p, then a draw
// from a counter-based RNG, so a seeded sequence gets the same tokens whatever batch it is in.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/grammar/grammar_matcher.h"
#include "engine/sampler/sampling_params.h"

namespace dq {

// Temperatures below this are treated as greedy (vLLM does the same): dividing by them would
// overflow the logits. Device samplers use the same cut.
inline constexpr float kGreedyTemperature = 1e-5f;

// One entry of a top-logprobs list: a token id and its log-probability.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// log(sum(exp(logits))), computed stably. -inf for an empty span or all -inf logits.
float LogSumExp(std::span<const float> logits);

// log softmax(logits)[token] of the raw distribution (no penalties, no temperature).
// `token` must index into `logits`.
float LogSoftmaxAt(std::span<const float> logits, int32_t token);

// The min(k, logits.size()) most likely tokens of the raw distribution with their
// log-probabilities, most likely first (lower id first on ties). O(V + k log k).
std::vector<TokenLogprob> TopLogprobs(std::span<const float> logits, int k);

// Samples the tokens of one sequence. Construct it from validated params (see Validate), call
// Sample() on each step's logits and Accept() with the token that was appended. Not thread-safe;
// one per sequence.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Picks the next token from `logits` (one row, vocab-sized). Uses `logits` as scratch: the
  // values are changed (penalties, temperature, probabilities), so take logprobs first.
  // Applies, in order: the constraints (ApplyConstraints), presence/frequency/repetition penalties
  // over the accepted tokens, temperature, top-k, top-p, min-p, then draws u and takes the first
  // token, in id order, whose prefix of the kept mass exceeds u * total (what
  // engine/cuda/sampling.h's kernels do with the same u). Temperature 0 returns the argmax (lowest
  // id on ties). The k-th call for a given seed always uses the k-th random number of that seed.
  int32_t Sample(std::span<float> logits);

  // Takes the uniform that the next Sample() call would have drawn, for a draw done elsewhere
  // (on the device): the counter advances exactly as Sample() would advance it (Sample()
  // draws once per call on every path, greedy included), so the stream stays the same whether
  // each step samples here or on the device.
  double DrawUniform() { return NextUniform(); }

  // Whether a device draw gives this sampler's token: no presence/frequency/repetition
  // penalties (the device kernels apply none; they need the accepted-token counts), no
  // logit_bias, min_tokens or grammar (their masks are applied here, on the host row).
  bool DeviceSamplable() const;

  // Records a generated token so later penalties see it, and advances the grammar over it.
  void Accept(int32_t token);

  // The first step of Sample: adds logit_bias, masks EOS and stop ids (-inf) while fewer than
  // min_tokens tokens were accepted, and masks every token the grammar does not allow next.
  // Should min_tokens and the grammar together allow nothing (the document is complete early),
  // the grammar wins: it can only end. Should the grammar allow no token at all (a vocabulary
  // that cannot write a byte the document needs), only EOS is left, so the sequence ends.
  void ApplyConstraints(std::span<float> logits);
  // The grammar position (null without a grammar).
  const grammar::GrammarMatcher* matcher() const { return matcher_ ? &*matcher_ : nullptr; }
  // Tokens accepted so far.
  int generated() const { return generated_; }

  // Applies the presence/frequency/repetition penalties in place (the first step of Sample).
  void ApplyPenalties(std::span<float> logits) const;

  const SamplingParams& params() const { return params_; }
  // How many times `token` was accepted.
  int Count(int32_t token) const;
  // The number of random numbers drawn so far (the RNG counter).
  uint64_t draws() const { return draws_; }
  // Continues a stream another sampler started (the prefill worker sampled the first token):
  // the next draw is the (draws + 1)-th of the seed's stream. Precondition: nothing drawn yet.
  void ResumeAfter(uint64_t draws) { draws_ = draws; }

 private:
  struct Candidate {
    float value;  // the logit, later exp(logit - max logit)
    int32_t id;
  };

  // A uniform double in [0, 1), the `draws_`-th of this seed's stream.
  double NextUniform();
  // Sampling over all of `logits` with only min-p (no top-k/top-p): no sorting at all.
  int32_t SampleUnsorted(std::span<float> logits, double u) const;
  // Sampling with top-k and/or top-p over candidates_, without full sorts; the draw is in id
  // order over the kept set, like SampleUnsorted's. Uses `logits` as scratch.
  int32_t SampleSorted(std::span<float> logits, double u);
  // Reorders candidates_[0, k) (values are probabilities) so the top-p nucleus comes first;
  // returns its size (at least 1).
  size_t SelectNucleus(size_t k);
  // Orders candidates_[lo, hi) far enough to find where the cumulative mass (starting at
  // `before`) reaches `target`; returns that cut.
  size_t CutInOrder(size_t lo, size_t hi, double before, double target);

  SamplingParams params_;
  uint64_t seed_;
  uint64_t draws_ = 0;
  std::unordered_map<int32_t, int> counts_;
  std::vector<Candidate> candidates_;  // scratch, reused across calls
  std::vector<double> bucket_mass_;    // scratch for SelectNucleus
  std::optional<grammar::GrammarMatcher> matcher_;
  std::vector<uint32_t> mask_;  // scratch: the grammar's allowed-token bits
  int generated_ = 0;
};

}  // namespace dq
