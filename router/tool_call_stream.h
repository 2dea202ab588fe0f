// One chat completion's tool-call state, between the decode stream (Deltas) and the response:
// with tools (and tool_choice not "none") the text runs through the served model's
// ToolCallParser, so the client gets content plus whole calls; without, the text passes through.
// The HTTP front end uses it for streamed and whole answers alike.
#pragma once

#include <optional>

#include "router/api_types.h"
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
  // parallel_tool_calls.
  static ToolCallStream For(const ChatCompletionRequest& request, const ServedModel& model);

  // The delta's text as content that can be shown now, and the calls it completed.
  ToolCallParser::Output Feed(const Delta& delta);
  // The end of the text: held-back content and the last calls.
  ToolCallParser::Output Finish();
  // The answer's finish_reason: "tool_calls" when a call was returned and the generation
  // stopped normally; a cut by max_tokens stays "length", an abort "abort".
  FinishReason Reason(FinishReason generation) const;

  bool parsing() const { return parser_.has_value(); }

 private:
  std::optional<ToolCallParser> parser_;
};

}  // namespace dq::router
