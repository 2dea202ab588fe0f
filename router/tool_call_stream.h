// One chat completion's tool-call state, between the decode stream (Deltas) and the response:
// with tools (and tool_choice not "none") the text runs through the served model's
// ToolCallParser, so the client gets content plus whole calls; without, the text passes through.
// The HTTP front end builds both the whole answer and the event stream through it.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "router/api_types.h"
#include "router/openai_response.h"
#include "router/output_assembler.h"
#include "router/served_model.h"
#include "router/tool_call_parser.h"

namespace dq::router {

class ToolCallStream {
 public:
  // `format` nullopt: no tools, text passes through. `max_calls` 0: no limit.
  explicit ToolCallStream(std::optional<ToolCallFormat> format, int max_calls = 0);
  // The request's: parsing when it has tools and tool_choice is not "none" (ChatGeneration has
  // already refused tools for a model without a format), at most one call without
  // parallel_tool_calls; a forced call (forced_tool_call.h) is the whole answer, read at the end.
  static ToolCallStream For(const ChatCompletionRequest& request, const ServedModel& model);

  // Whole answer: the delta's content and completed calls go into `choice`.
  void Add(const Delta& delta, ChatChoice* choice);
  // Whole answer's end: the held-back rest, and the finish_reason from the generation's.
  void Finish(FinishReason generation, ChatChoice* choice);

  // Streamed: the events of one delta, a content chunk (with `logprobs`, sent even while the
  // parser holds the text back) and one chunk per completed call.
  std::string Events(const Delta& delta, std::span<const TokenLogprobs> logprobs,
                     ChatCompletionStream& stream);
  // Streamed end: events for the held-back rest, then the finish chunk.
  std::string FinishEvents(FinishReason generation, ChatCompletionStream& stream);

  // "tool_calls" when a call was returned and the generation stopped normally; a cut by
  // max_tokens stays "length", an abort "abort".
  FinishReason Reason(FinishReason generation) const;
  bool parsing() const { return parser_.has_value(); }

 private:
  ToolCallParser::Output Feed(const std::string& text);
  ToolCallParser::Output End();

  std::optional<ToolCallParser> parser_;
};

}  // namespace dq::router
