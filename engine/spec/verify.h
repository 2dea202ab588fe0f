// The lossless verify rule of speculative decoding for point-mass drafts, shared by every decode
// loop (the Generator, the decode worker's batcher) so that it lives in one place: the target
// scored [next_token, draft...] in one forward pass; walk its rows in order, draw each
// position's token with the sequence's own Sampler (one draw per emitted token, as plain
// decoding spends), and stop after the first token that is not the next draft token. Drawing
// y ~ p and keeping the draft iff y == draft is the point-mass rejection rule
// (rejection_sampler.h), so greedy and seeded requests give exactly the tokens of plain decoding.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "engine/sampler/sampler.h"

namespace dq {

// Appends `token`, the target's choice at verified position `position` (0: the token after
// next_token), to the sequence: the callee Accept()s it into the sampler (so the next position
// sees its penalties), checks stop conditions and returns false once the sequence has ended.
using VerifiedTokenFn = std::function<bool(int position, int32_t token)>;

// `fed`: the tokens the target was fed for this sequence (next_token, then the draft); `rows`:
// fed.size() rows of `vocab` raw logits, row j scoring the token after fed[j]. The rows are not
// changed (each is copied before sampling), so callers can still read logprobs from them.
// Returns how many draft tokens were kept (the sequence's KV should keep fed[0 .. accepted]).
int VerifyDraft(std::span<const int32_t> fed, const float* rows, int vocab, Sampler& sampler,
                const VerifiedTokenFn& emit);

// How many tokens a sequence may draft this step: at most `k`; emitting draft + 1 tokens must
// not pass `max_tokens` (with `generated` already emitted), and the fed positions
// num_tokens .. num_tokens + draft must stay below `token_limit` (the context, or the tokens a
// KV lease holds). Never negative.
int DraftBudget(int k, int max_tokens, int generated, int num_tokens, int token_limit);

}  // namespace dq
