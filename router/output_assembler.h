// Turns the decode worker's token stream into what clients see: text deltas (incrementally
// detokenized, never a broken UTF-8 sequence, stop strings held back and cut), token ids and
// logprobs with their token strings. Stop strings are the router's job (the workers have no
// detokenizer in their loop); on a match the caller cancels the decode call.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "dqserve/v1/generate.pb.h"
#include "engine/sampler/stop_checker.h"
#include "router/openai_response.h"

namespace dq::router {

// What one step of the stream adds for the client.
struct Delta {
  std::string text;
  std::vector<int32_t> token_ids;
  // One per token id when logprobs were requested: ids and logprobs from the worker, token
  // strings filled in by the router (valid UTF-8, see TokenString).
  std::vector<dqserve::v1::PositionLogprobs> logprobs;

  bool empty() const { return text.empty() && token_ids.empty(); }
};

// A token's text on its own, with broken UTF-8 replaced by U+FFFD (proto strings must be
// valid UTF-8; OpenAI's "bytes" field carries the raw bytes).
std::string TokenString(const Tokenizer& tokenizer, int32_t id);
// `lp` with every token string filled in.
dqserve::v1::PositionLogprobs WithTokenStrings(const Tokenizer& tokenizer,
                                               dqserve::v1::PositionLogprobs lp);
// The OpenAI response layer's form (raw bytes per token).
TokenLogprobs ToTokenLogprobs(const Tokenizer& tokenizer, const dqserve::v1::PositionLogprobs& lp);
// Echo's prompt logprobs: one entry per prompt token, the first without a logprob, the rest from
// the prefill worker's prompt_logprobs (one per prompt token from the second on).
std::vector<TokenLogprobs> PromptTokenLogprobs(
    const Tokenizer& tokenizer, std::span<const int32_t> prompt,
    std::span<const dqserve::v1::PositionLogprobs> prompt_logprobs);

class OutputAssembler {
 public:
  // Special tokens are left out of the text, except `keep_special` (tool-call markers). A stop
  // string ending before the `min_tokens`-th token is text (StopChecker).
  OutputAssembler(Tokenizer tokenizer, std::vector<std::string> stop_strings,
                  std::vector<int32_t> keep_special = {}, int min_tokens = 0);

  // Adds one generated token (and its logprobs, or nullptr) to `delta`. Returns true when a
  // stop string matched: the text up to it is in `delta`, and every later token is ignored.
  bool Feed(int32_t id, const dqserve::v1::PositionLogprobs* logprobs, Delta* delta);
  // Generation ended for another reason: appends the held-back text to `delta` (a stop string
  // completed by the held-back bytes still cuts it). Returns stopped().
  bool Finish(Delta* delta);

  bool stopped() const { return stops_.stopped(); }
  const std::string& matched_stop() const { return matched_; }
  // Tokens fed (up to and including the one that completed a stop string).
  int tokens() const { return tokens_; }

 private:
  Tokenizer tokenizer_;
  IncrementalDetokenizer detokenizer_;
  StopChecker stops_;
  std::string matched_;
  int tokens_ = 0;
};

}  // namespace dq::router
