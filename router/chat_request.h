// The chat-specific part of a /v1/chat/completions body: messages (with tool calls and tool
// results), tools, tool_choice, parallel_tool_calls and chat_template_kwargs. Internal to the
// router's API layer (openai_request.cpp reads the rest).
//
// Messages: a non-empty array of {role, content, name?, reasoning_content?, tool_calls?,
// tool_call_id?}; role
// system/developer (read as system)/user/assistant/tool; content a string or an array of
// {"type":"text","text":...} parts (joined with "\n", as vLLM does), null or absent only for
// assistant turns; tool_calls only on assistant turns, each {id, type:"function",
// function:{name, arguments (a string)}}; tool turns need content. Tools: an array of
// {"type":"function","function":{name (1-64 of [A-Za-z0-9_-]), description?, parameters? (a JSON
// schema object), strict?}} with distinct names. tool_choice: "none", "auto", "required" or
// {"type":"function","function":{"name":...}} naming one of the tools.
#pragma once

#include "router/api_types.h"
#include "router/json_fields.h"

namespace dq::router {

// Reads the fields above from `f` (the body's reader) into `r`.
void ReadChatFields(FieldReader& f, ChatCompletionRequest* r);

}  // namespace dq::router
