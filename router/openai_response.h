// OpenAI-compatible response bodies: chat.completion and text_completion objects, their stream
// chunks as server-sent events, and logprobs in both of OpenAI's formats.
//
// Stream shape (both endpoints), each event "data: <json>\n\n":
//   chat: a role chunk (delta {"role":"assistant","content":""}), content chunks
//   (delta {"content":...}), with tools one chunk per call (delta {"tool_calls": [{"index",
//   "id", "type": "function", "function": {"name", "arguments"}}]}, the whole call at once,
//   index counting the calls from 0), a finish chunk (delta {}, finish_reason set); completions:
//   text chunks, then a finish chunk (text "", finish_reason set). With
//   stream_options.include_usage every chunk carries "usage": null and a last chunk with
//   "choices": [] carries the usage. Then "data: [DONE]\n\n".
//
// Logprobs. Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token",
// "logprob", "bytes"}]}]}. Completions (the legacy format): {"text_offset": [...],
// "token_logprobs": [...], "tokens": [...], "top_logprobs": [{token: logprob} or null]}, where
// each top_logprobs dict holds the k alternatives plus the chosen token (so up to k + 1 keys,
// as OpenAI and vLLM do).
//
// lm-evaluation-harness's `local-completions` model scores loglikelihood requests with
// {"prompt": [[context + continuation token ids]], "max_tokens": 1, "temperature": 0,
//  "logprobs": 1, "echo": true, "seed": ...} and reads choices[i].logprobs.token_logprobs and
// .top_logprobs, sliced [ctxlen:-1]: the echoed prompt's positions from the continuation on,
// minus the one generated token. It sums the token_logprobs, and calls a position greedy when
// its logprob equals max(top_logprobs[i].values()). So with echo the lists must hold exactly one
// entry per prompt token (the first one null: no logprob without a preceding token) followed by
// the generated tokens, and each dict must include the top-1 token. Its generate_until path
// reads only choices[i].text (and for chat, choices[i].message.content).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/chat_template.h"
#include "nlohmann/json.hpp"
#include "router/api_error.h"
#include "router/api_types.h"

namespace dq::router {

struct ResponseHeader {
  std::string id;       // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// `n` random letters and digits (response and tool-call ids; not secrets).
std::string RandomAlphanumerics(size_t n);

// A fresh id ("chatcmpl-" or "cmpl-" and 24 random alphanumerics) and the current time.
ResponseHeader NewResponseHeader(ApiEndpoint endpoint, std::string model);

// Speculative decoding's per-request counters (dqserve extension "usage.speculative").
struct SpecUsage {
  int64_t steps = 0;     // decode steps that verified a draft (possibly empty)
  int64_t drafted = 0;   // draft tokens verified
  int64_t accepted = 0;  // draft tokens kept (<= drafted)
  // A self drafter's prompt KV: "shipped" (the prefill worker computed it), "recomputed" (the
  // decode worker did); empty for other drafters.
  std::string drafter_prompt;
};

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  std::optional<SpecUsage> speculative;  // set when the decode worker drafted for the request
  int cached_tokens = 0;  // of prompt_tokens, served from a prefix cache (OpenAI's details)
};

struct LogprobCandidate {
  std::string bytes;  // the token's bytes, decoded alone (may be part of a character)
  float logprob = 0.0f;
};

// One position: the token there, its log-probability and the most likely alternatives (most
// likely first; the caller picks how many).
struct TokenLogprobs {
  std::string bytes;
  std::optional<float> logprob;  // nullopt: the first prompt token of an echo
  std::vector<LogprobCandidate> top;
};

// Token strings are the bytes with broken UTF-8 replaced by U+FFFD; "bytes" keeps the raw bytes
// so a client can join a character split over tokens. -inf logprobs (masked tokens) become
// -9999.0, as in vLLM, because JSON has no infinity.
nlohmann::ordered_json ChatLogprobsJson(std::span<const TokenLogprobs> tokens);
// text_offset counts code points (what Python's len() counts) from `text_offset_start`, adding
// each token string's length. Two alternatives with the same string keep the higher logprob.
nlohmann::ordered_json CompletionLogprobsJson(std::span<const TokenLogprobs> tokens,
                                              size_t text_offset_start = 0);

struct ChatChoice {
  std::string content;  // with tool calls and nothing else: "content": null
  FinishReason finish_reason = FinishReason::kStop;
  std::optional<std::vector<TokenLogprobs>> logprobs;  // nullopt renders "logprobs": null
  std::vector<ChatToolCall> tool_calls;                // message.tool_calls when non-empty
};

struct CompletionChoice {
  std::string text;
  FinishReason finish_reason = FinishReason::kStop;
  std::optional<std::vector<TokenLogprobs>> logprobs;
};

// For echo: puts the prompt's text before the choice's text, and the prompt's logprobs (one per
// prompt token, the first with logprob nullopt) before the generated ones.
void PrependEcho(std::string_view prompt_text, std::vector<TokenLogprobs> prompt_logprobs,
                 CompletionChoice* choice);

// Non-streamed bodies: {"id","object","created","model","choices":[...],"usage":{...}}.
// Several choices: each's "index" is its position.
std::string ChatCompletionJson(const ResponseHeader& header, const ChatChoice& choice,
                               const Usage& usage);
std::string ChatCompletionJson(const ResponseHeader& header, std::span<const ChatChoice> choices,
                               const Usage& usage);
std::string CompletionJson(const ResponseHeader& header, const CompletionChoice& choice,
                           const Usage& usage);
std::string CompletionJson(const ResponseHeader& header, std::span<const CompletionChoice> choices,
                           const Usage& usage);

// "data: <json>\n\n".
std::string SseData(const nlohmann::ordered_json& payload);
// An error after the stream has started (the status line is already sent): an error body as
// an event, which OpenAI's clients raise as an APIError.
std::string SseError(const ApiError& error);
// "data: [DONE]\n\n".
std::string SseDone();

// The events of one streamed chat completion's choice `index` (several choices interleave their
// chunks in one stream). `logprobs`: content chunks carry logprobs.
class ChatCompletionStream {
 public:
  ChatCompletionStream(ResponseHeader header, bool include_usage, bool logprobs, int index = 0);

  std::string RoleChunk() const;
  std::string ContentChunk(std::string_view text,
                           std::span<const TokenLogprobs> logprobs = {}) const;
  // One whole call as delta.tool_calls, its index the number of calls sent before it.
  std::string ToolCallChunk(const ChatToolCall& call);
  std::string FinishChunk(FinishReason reason) const;
  // Empty unless include_usage.
  std::string UsageChunk(const Usage& usage) const;

 private:
  nlohmann::ordered_json Chunk(nlohmann::ordered_json choices) const;

  ResponseHeader header_;
  bool include_usage_;
  bool logprobs_;
  int index_;
  int tool_calls_ = 0;  // calls sent so far
};

// The events of one streamed completion's choice `index`. Keeps the text offset across chunks.
class CompletionStream {
 public:
  CompletionStream(ResponseHeader header, bool include_usage, bool logprobs, int index = 0);

  // With echo, the first chunk is the prompt text with the prompt's logprobs.
  std::string TextChunk(std::string_view text, std::span<const TokenLogprobs> logprobs = {});
  std::string FinishChunk(FinishReason reason) const;
  std::string UsageChunk(const Usage& usage) const;

 private:
  nlohmann::ordered_json Chunk(nlohmann::ordered_json choices) const;

  ResponseHeader header_;
  bool include_usage_;
  bool logprobs_;
  int index_;
  size_t text_offset_ = 0;  // code points sent so far
};

}  // namespace dq::router
