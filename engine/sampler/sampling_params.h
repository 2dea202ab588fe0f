// Per-request sampling settings (the OpenAI API's knobs plus vLLM's common extras) and why a
// sequence finished.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace dq {
namespace grammar {
class CompiledGrammar;
}

// Why a sequence stopped generating. kStop: EOS, a stop token id or a stop string matched;
// kLength: max_tokens (or the context) ran out; kAbort: the client went away or it was cancelled.
enum class FinishReason { kStop, kLength, kAbort };

// The OpenAI API's spelling: "stop", "length", "abort".
inline std::string_view FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
  }
  return "unknown";
}

struct SamplingParams {
  // Softmax temperature; 0 means greedy (argmax, lowest token id on ties).
  float temperature = 1.0f;
  // Keep only the k most likely tokens; 0 (or -1, vLLM's spelling) turns it off.
  int top_k = 0;
  // Nucleus sampling: keep the smallest set of most likely tokens whose mass reaches top_p.
  float top_p = 1.0f;
  // Drop tokens whose probability is below min_p times the most likely token's.
  float min_p = 0.0f;
  // OpenAI semantics over the tokens generated so far: presence subtracts once from every token
  // seen at least once, frequency subtracts count * penalty.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // HF/vLLM multiplicative penalty on generated tokens: positive logits are divided by it,
  // negative ones multiplied. 1 turns it off.
  float repetition_penalty = 1.0f;
  // Same seed, same logits -> same tokens, whatever else is in the batch. Unset: random.
  std::optional<uint64_t> seed;
  // Most tokens to generate (OpenAI's default for completions is 16; the API layer sets it).
  int max_tokens = 16;
  // Generation stops when one of these is sampled (the caller checks; see StopChecker for
  // strings).
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;
  // Keep generating past the model's EOS token.
  bool ignore_eos = false;
  // OpenAI's logit_bias: (token id, bias in [-100, 100]) added to the raw logits before
  // penalties and temperature (-100 in effect bans a token, +100 forces it). Logprobs stay the
  // raw distribution's.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // vLLM's min_tokens: EOS (eos_token_ids) and stop_token_ids are masked until this many tokens
  // were generated; a stop string stops only if it ends in token min_tokens or later
  // (StopChecker's min_tokens, which its callers must pass).
  int min_tokens = 0;
  // What min_tokens and the grammar treat as EOS: the model's EOS ids (the worker fills them in).
  std::vector<int32_t> eos_token_ids;
  // Structured output: every sampled token must keep the output a prefix of a document of this
  // grammar, and EOS is allowed only once the document is complete (null: unconstrained).
  // Shared and immutable; each Sampler keeps its own position in it.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
};

// OK if every field is in range for a model with `vocab_size` tokens; otherwise
// InvalidArgument naming the field, the allowed range and the value given, e.g.
// "temperature must be in [0, 2], got 3". Defined in sampler.cpp.
absl::Status Validate(const SamplingParams& params, int vocab_size);

}  // namespace dq
