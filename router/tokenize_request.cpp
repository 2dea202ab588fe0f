#include "router/tokenize_request.h"

#include <utility>

#include "router/chat_request.h"
#include "router/json_fields.h"

namespace dq::router {
namespace {

using nlohmann::json;

void ReadForm(FieldReader& f, TokenizeRequest* r) {
  const bool has_prompt = f.Find("prompt") != nullptr;
  const bool has_messages = f.Find("messages") != nullptr;
  if (has_prompt && has_messages) {
    return f.Fail(InvalidRequest("messages",
                                 "Send either 'prompt' (text) or 'messages' (a chat), not both."));
  }
  if (!has_prompt && !has_messages) return f.Fail(MissingField("prompt"));
  if (has_prompt) {
    std::string text;
    if (f.String("prompt", &text)) r->prompt = std::move(text);
    return;
  }
  r->add_special_tokens = false;  // vLLM's default for the chat form: the template has them
  ReadChatFields(f, &r->chat);
  f.Bool("add_generation_prompt", &r->add_generation_prompt);
  bool continue_final = false;
  if (f.Bool("continue_final_message", &continue_final) && continue_final) {
    f.Fail(InvalidRequest("continue_final_message",
                          "continue_final_message is not supported; send false or leave it out."));
  }
}

}  // namespace

ApiResult<TokenizeRequest> ParseTokenizeRequest(std::string_view body,
                                                const ParseOptions& options) {
  ApiResult<json> parsed = ParseJsonBody(body, options.max_json_depth);
  if (!parsed.ok()) return parsed.error();
  TokenizeRequest r;
  FieldReader f(*parsed);
  ReadModel(f, options, &r.model);
  ReadForm(f, &r);
  f.Bool("add_special_tokens", &r.add_special_tokens);
  f.Bool("return_token_strs", &r.return_token_strs);
  f.RejectUnread({});
  if (!f.ok()) return f.error();
  if (!r.prompt) KeepClientKeyOrder(body, &r.chat);
  return r;
}

ApiResult<DetokenizeRequest> ParseDetokenizeRequest(std::string_view body,
                                                    const ParseOptions& options) {
  ApiResult<json> parsed = ParseJsonBody(body, options.max_json_depth);
  if (!parsed.ok()) return parsed.error();
  DetokenizeRequest r;
  FieldReader f(*parsed);
  ReadModel(f, options, &r.model);
  const json* tokens = f.ok() ? f.Find("tokens") : nullptr;
  if (tokens == nullptr && f.ok()) f.Fail(MissingField("tokens"));
  if (tokens != nullptr) ReadTokenIds(f, *tokens, "tokens", options.vocab_size, &r.tokens);
  f.RejectUnread({});
  if (!f.ok()) return f.error();
  return r;
}

}  // namespace dq::router
