// tool_choice "required" or a named function: the call is forced by constraining decoding to a
// JSON schema of the call object, {"name": ..., "arguments": {...}}, with the arguments held to
// the tool's parameters schema. The model writes that object alone (no <tool_call> markers), so
// the router reads the whole answer as the one call (ToolCallStream::For). "required" with
// several tools is an anyOf of one such object per tool; one call is forced even when
// parallel_tool_calls is true (OpenAI asks for at least one).
#pragma once

#include <string>

#include "router/api_types.h"

namespace dq::router {

// Whether the request forces a call: tool_choice "required" or a function (the parser has
// checked that tools are sent and that the function is one of them).
bool ForcesToolCall(const ChatCompletionRequest& request);

// The schema of the forced call as JSON text (key order kept, as the grammar compiler emits
// properties in schema order): name first, then arguments. A tool without parameters takes any
// object. $refs inside a tool's parameters ("#/$defs/..") are rebased to where the parameters
// sit in the call schema, so they still point into the tool's own schema.
std::string ForcedToolCallSchema(const ChatCompletionRequest& request);

}  // namespace dq::router
