// Text generation over a ModelRunner: prefill each prompt, then decode all sequences together
// (one token per sequence per step), sampling, stop conditions and streaming text.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tokenizer/tokenizer.h"
#include "engine/model/model_runner.h"
#include "engine/sampler/sampling_params.h"
#include "engine/spec/drafter.h"
#include "engine/spec/spec_config.h"

namespace dq {

class HiddenCapture;

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
  SpecStats spec;             // speculation counters (all zero without a drafter)
};

// Called with each request's newly completed text, in generation order.
using TextCallback = std::function<void(size_t request, std::string_view text)>;

struct GeneratorOptions {
  // Speculative decoding: each decode step feeds [last token + up to spec.k drafted tokens] per
  // sequence as one multi-token item of the decode phase (logits at every position), then keeps
  // the longest prefix of the draft that the target's own sampling agrees with, plus the
  // target's next token, and truncates the KV cache back to what was kept. Lossless: the output
  // has exactly the target's distribution, and a greedy or seeded request gives the same tokens
  // as without a drafter (each emitted token spends one draw of the request's Sampler, as plain
  // decoding does). Penalties are fine (tokens are Accept()ed in order before the next
  // position is sampled). Null: plain decoding. Not owned; must outlive the generator.
  Drafter* drafter = nullptr;
  SpecConfig spec;
  // Prompts longer than this prefill in chunks of it (0: one pass). The default is the CUDA
  // backend's max_batch_tokens; chunking changes no result, only how many passes a prompt takes.
  int prefill_chunk_tokens = 8192;
};

class Generator {
 public:
  // `eos_token_ids` end a sequence (unless its params say ignore_eos).
  Generator(ModelRunner& runner, const Tokenizer& tokenizer, std::vector<int32_t> eos_token_ids,
            GeneratorOptions options = {})
      : runner_(runner),
        tokenizer_(tokenizer),
        eos_(std::move(eos_token_ids)),
        options_(std::move(options)) {}

  // Runs the requests to completion. Invalid requests (empty or over-long prompt, bad sampling
  // parameters, not enough KV memory) fail the call before any work is done, with an error that
  // says which request and why; so does a bad speculation setup (k out of range, a drafter
  // that does not fit the model or has a distribution, which needs the rejection rule the
  // generator does not run yet). KV blocks are returned to the pool in every case.
  absl::StatusOr<std::vector<GenerationResult>> Generate(
      std::span<const GenerationRequest> requests, const TextCallback& on_text = {});

 private:
  struct Sequence;
  absl::Status CheckRequests(std::span<const GenerationRequest> requests) const;
  absl::Status Prefill(Sequence& s);
  absl::Status CheckSpeculation() const;
  absl::Status DecodeStep(std::vector<Sequence*>& active, const TextCallback& on_text);
  // One speculative step for every active sequence: draft, verify in one forward, emit.
  absl::Status SpecDecodeStep(std::vector<Sequence*>& active, const TextCallback& on_text);
  // Fills each sequence's `input`: its next token, then the drafter's proposal (bounded by
  // its adaptive k, max_tokens and the context).
  absl::Status Propose(std::vector<Sequence*>& active);
  // Samples s's verified positions in order, emitting until a draft token is missed or s ends;
  // then rolls s's KV back to the tokens kept and hands the drafter the kept tokens' target
  // hidden states (when it reads them: rows from `first_token` of the captured pass).
  void VerifyAndEmit(Sequence& s, const float* rows, int vocab, int64_t first_token,
                     const TextCallback& on_text);
  void Emit(Sequence& s, int32_t token, const TextCallback& on_text);

  ModelRunner& runner_;
  const Tokenizer& tokenizer_;
  std::vector<int32_t> eos_;
  GeneratorOptions options_;
  // The target layers a drafter reads (DFlash), captured in every target pass; null otherwise.
  std::shared_ptr<HiddenCapture> capture_;
};

}  // namespace dq
