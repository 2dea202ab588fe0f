// The acceptance rule of speculative sampling (Leviathan et al. 2023; Chen et al. 2023) that
// keeps the output distribution exactly the target's: a drafted token x ~ q is kept with
// probability min(1, p(x) / q(x)); otherwise the token is drawn from norm(max(0, p - q)).
// Summed over x, P(emit y) = min(p(y), q(y)) + (1 - sum_x min(p, q)) * norm(max(0, p - q))(y)
// = p(y).
//
// For a deterministic drafter (q a point mass on x) the rule is: keep x with probability p(x),
// else draw from p without x. Drawing y ~ p with the sequence's own Sampler and keeping the
// draft iff y == x is the same distribution (P(keep) = p(x); given a miss, y ~ p restricted to
// y != x, renormalised) and spends one uniform per emitted token, so a seeded request yields
// the same tokens with or without speculation. The Generator does that for point-mass drafts;
// this rule is for drafters with a distribution (self-drafter, DFlash).
#pragma once

#include <cstdint>
#include <span>

namespace dq {

struct RejectionResult {
  bool accepted = false;  // the drafted token was kept
  int32_t token = 0;      // the token emitted at this position (the draft when accepted)
};

// `p`: the target's processed probabilities at the position (after penalties, temperature,
// top-k/top-p/min-p; unnormalised is fine, zeros are dropped tokens); `q`: the drafter's, same
// size; `draft`: the token the drafter proposed (drawn from q). `u_accept`, `u_resample`:
// independent uniforms in [0, 1). The resample draws in id order, like Sampler's.
RejectionResult RejectionSample(std::span<const float> p, std::span<const float> q, int32_t draft,
                                double u_accept, double u_resample);

// The point-mass case spelled out (q = delta(draft)).
RejectionResult RejectionSamplePointMass(std::span<const float> p, int32_t draft, double u_accept,
                                         double u_resample);

}  // namespace dq
