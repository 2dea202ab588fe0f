// Text generation over a ModelRunner: prefill each prompt, then decode all sequences together
// (one token per sequence per step), sampling, stop conditions and streaming text.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tokenizer/tokenizer.h"
#include "engine/model/model_runner.h"
#include "engine/sampler/sampling_params.h"

namespace dq {

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids (a matched stop token id is not included)
  std::string text;             // their text, cut before a matched stop string
  FinishReason finish_reason = FinishReason::kLength;
  int prompt_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;  // from the first decode step to the last token
};

// Called with each request's newly completed text, in generation order.
using TextCallback = std::function<void(size_t request, std::string_view text)>;

class Generator {
 public:
  // `eos_token_ids` end a sequence (unless its params say ignore_eos).
  Generator(ModelRunner& runner, const Tokenizer& tokenizer, std::vector<int32_t> eos_token_ids)
      : runner_(runner), tokenizer_(tokenizer), eos_(std::move(eos_token_ids)) {}

  // Runs the requests to completion. Invalid requests (empty or over-long prompt, bad sampling
  // parameters, not enough KV memory) fail the call before any work is done, with an error that
  // says which request and why. KV blocks are returned to the pool in every case.
  absl::StatusOr<std::vector<GenerationResult>> Generate(
      std::span<const GenerationRequest> requests, const TextCallback& on_text = {});

 private:
  struct Sequence;
  absl::Status CheckRequests(std::span<const GenerationRequest> requests) const;
  absl::Status Prefill(Sequence& s);
  absl::Status DecodeStep(std::vector<Sequence*>& active);
  void Emit(Sequence& s, int32_t token, const TextCallback& on_text);

  ModelRunner& runner_;
  const Tokenizer& tokenizer_;
  std::vector<int32_t> eos_;
};

}  // namespace dq
