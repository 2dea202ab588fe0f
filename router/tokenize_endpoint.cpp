#include "router/tokenize_endpoint.h"

#include <utility>

#include "nlohmann/json.hpp"

namespace dq::router {
namespace {

using ojson = nlohmann::ordered_json;

// Token text can be part of a UTF-8 sequence: such bytes become U+FFFD rather than failing.
std::string Dump(const ojson& body) {
  return body.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace

ApiResult<std::vector<int32_t>> TokenizeIds(const TokenizeRequest& request,
                                            const ServedModel& model) {
  if (request.prompt) {
    CompletionRequest completion;
    completion.prompt = *request.prompt;
    return model.CompletionPrompt(completion);
  }
  return model.ChatPrompt(request.chat.messages,
                          ChatRenderOptionsFor(request.chat, request.add_generation_prompt));
}

ApiResult<std::string> TokenizeJson(const TokenizeRequest& request, const ServedModel& model) {
  ApiResult<std::vector<int32_t>> ids = TokenizeIds(request, model);
  if (!ids.ok()) return ids.error();
  ojson body;
  body["count"] = ids->size();
  body["max_model_len"] = model.max_context;
  body["tokens"] = *ids;
  if (request.return_token_strs) {
    ojson strs = ojson::array();
    for (int32_t id : *ids) strs.push_back(std::string(model.tokenizer.IdToToken(id)));
    body["token_strs"] = std::move(strs);
  }
  return Dump(body);
}

std::string DetokenizeJson(const DetokenizeRequest& request, const ServedModel& model) {
  ojson body;
  body["prompt"] = model.tokenizer.Decode(request.tokens);
  return Dump(body);
}

}  // namespace dq::router
