#include "worker_common/proto_convert.h"

#include <algorithm>

#include "engine/grammar/compiled_grammar.h"
#include "engine/sampler/sampler.h"

namespace dq::worker {
namespace v1 = dqserve::v1;

absl::StatusOr<SamplingParams> SamplingFromProto(const v1::SamplingParams& p, int vocab_size,
                                                 int default_max_tokens,
                                                 grammar::GrammarCache* grammars) {
  SamplingParams s;
  if (p.has_temperature()) s.temperature = p.temperature();
  if (p.has_top_p()) s.top_p = p.top_p();
  if (p.has_top_k()) s.top_k = p.top_k();
  if (p.has_min_p()) s.min_p = p.min_p();
  if (p.has_seed()) s.seed = p.seed();
  s.max_tokens = p.has_max_tokens() ? static_cast<int>(p.max_tokens()) : default_max_tokens;
  s.stop.assign(p.stop().begin(), p.stop().end());
  s.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  if (p.has_presence_penalty()) s.presence_penalty = p.presence_penalty();
  if (p.has_frequency_penalty()) s.frequency_penalty = p.frequency_penalty();
  if (p.has_repetition_penalty()) s.repetition_penalty = p.repetition_penalty();
  s.ignore_eos = p.ignore_eos();
  for (const auto& [id, bias] : p.logit_bias()) s.logit_bias.emplace_back(id, bias);
  std::sort(s.logit_bias.begin(), s.logit_bias.end());  // a map's order is unspecified
  s.min_tokens = static_cast<int>(std::min<uint32_t>(p.min_tokens(), 1u << 30));
  if (grammars != nullptr) s.eos_token_ids = grammars->vocab().eos_ids();
  if (!p.json_schema().empty()) {
    if (grammars == nullptr) {
      return absl::UnimplementedError("this worker has no grammar compiler; json_schema is unset");
    }
    DQ_ASSIGN_OR_RETURN(s.grammar, grammars->JsonSchema(p.json_schema()));
  }
  DQ_RETURN_IF_ERROR(Validate(s, vocab_size));
  if (p.top_logprobs() > 20) {
    return absl::InvalidArgumentError("top_logprobs must be in [0, 20]");
  }
  return s;
}

v1::PositionLogprobs PositionLogprobsOf(std::span<const float> logits, int32_t chosen, int top) {
  v1::PositionLogprobs out;
  out.mutable_chosen()->set_token_id(chosen);
  out.mutable_chosen()->set_logprob(LogSoftmaxAt(logits, chosen));
  if (top > 0) {
    for (const TokenLogprob& t : TopLogprobs(logits, top)) {
      v1::TokenLogprob* e = out.add_top();
      e->set_token_id(t.token);
      e->set_logprob(t.logprob);
    }
  }
  return out;
}

v1::FinishReason FinishReasonToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kAbort:
      return v1::FINISH_REASON_ABORT;
  }
  return v1::FINISH_REASON_ERROR;
}

}  // namespace dq::worker
