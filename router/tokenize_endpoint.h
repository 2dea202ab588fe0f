// The answers of POST /tokenize and POST /detokenize (vLLM's shape) for the served model:
//   /tokenize   -> {"tokens": [ids], "count": n, "max_model_len": context, "token_strs"?: [...]}
//   /detokenize -> {"prompt": "text"}
// The completion form's ids are what /v1/completions feeds the model for that prompt
// (ServedModel::CompletionPrompt); the chat form's are what /v1/chat/completions feeds it
// (ServedModel::ChatPrompt), so a client's counts and loglikelihood spans match generation.
#pragma once

#include <string>

#include "router/api_error.h"
#include "router/served_model.h"
#include "router/tokenize_request.h"

namespace dq::router {

// The token ids of the request's prompt or chat; a 400 when the chat cannot be rendered.
ApiResult<std::vector<int32_t>> TokenizeIds(const TokenizeRequest& request,
                                            const ServedModel& model);

// The response bodies (JSON).
ApiResult<std::string> TokenizeJson(const TokenizeRequest& request, const ServedModel& model);
std::string DetokenizeJson(const DetokenizeRequest& request, const ServedModel& model);

}  // namespace dq::router
