// Conversions between the wire types (proto/) and the engine's, shared by both workers.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "dqserve/v1/generate.pb.h"
#include "engine/grammar/grammar_cache.h"
#include "engine/sampler/sampling_params.h"

namespace dq::worker {

// The engine's params from the wire's, validated for a model with `vocab_size` tokens
// (InvalidArgument naming the field otherwise). An unset max_tokens becomes `default_max_tokens`
// (the room the context leaves, which the caller knows). `grammars` compiles json_schema (and
// gives the EOS ids min_tokens masks); without it a json_schema is Unimplemented.
absl::StatusOr<SamplingParams> SamplingFromProto(const dqserve::v1::SamplingParams& p,
                                                 int vocab_size, int default_max_tokens,
                                                 grammar::GrammarCache* grammars = nullptr);

// The log-probability of `chosen` under the raw distribution `logits` and the `top` most likely
// alternatives (token ids and logprobs; the router fills in token strings).
dqserve::v1::PositionLogprobs PositionLogprobsOf(std::span<const float> logits, int32_t chosen,
                                                 int top);

dqserve::v1::FinishReason FinishReasonToProto(FinishReason r);

}  // namespace dq::worker
