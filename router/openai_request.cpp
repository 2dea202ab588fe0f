#include "router/openai_request.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "router/chat_request.h"
#include "router/json_fields.h"
#include "router/utf8.h"

namespace dq::router {
namespace {

using nlohmann::json;

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();

// True when brackets outside strings nest deeper than `max_depth`. One pass, no recursion.
bool NestsDeeperThan(std::string_view body, size_t max_depth) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

// nlohmann's message without its "[json.exception...] " tag and without the "; last read: ..."
// tail, which can quote a whole long string back at the client.
std::string ParserReason(std::string_view what) {
  if (const size_t tag_end = what.find("] "); tag_end != std::string_view::npos) {
    what.remove_prefix(tag_end + 2);
  }
  return std::string(what.substr(0, what.find("; last read")));
}

}  // namespace

void ReadModel(FieldReader& f, const ParseOptions& options, std::string* model) {
  if (!f.String("model", model)) {
    // vLLM's leniency: a single-model server needs no name.
    if (f.ok() && !options.served_models.empty()) *model = options.served_models.front();
    return;
  }
  const auto& served = options.served_models;
  if (served.empty() || std::find(served.begin(), served.end(), *model) != served.end()) return;
  f.Fail(ApiError{404, "invalid_request_error",
                  absl::StrCat("The model '", *model, "' does not exist. This server serves: '",
                               absl::StrJoin(served, "', '"), "'. Set \"model\" to one of them."),
                  "model", "model_not_found"});
}

// Token ids for `param` (an array of integers), each in [0, vocab_size).
void ReadTokenIds(FieldReader& f, const json& ids, const std::string& param, int vocab_size,
                  std::vector<int32_t>* out) {
  if (!ids.is_array()) return f.Fail(WrongType(param, "an array of token ids", ids));
  const int64_t hi = vocab_size > 0 ? vocab_size - 1 : kMaxInt;
  for (size_t i = 0; i < ids.size() && f.ok(); ++i) {
    const json& id = ids[i];
    const std::string item = absl::StrCat(param, "[", i, "]");
    if (!id.is_number_integer()) return f.Fail(WrongType(item, "an integer token id", id));
    const bool in_range = id.is_number_unsigned()
                              ? id.get<uint64_t>() <= static_cast<uint64_t>(hi)
                              : id.get<int64_t>() >= 0 && id.get<int64_t>() <= hi;
    if (!in_range) {
      return f.Fail(BadValue(item,
                             vocab_size > 0
                                 ? absl::StrCat("a token id of this model, in [0, ", hi, "]")
                                 : std::string("a non-negative token id"),
                             id));
    }
    out->push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
}

namespace {

void ReadStopString(FieldReader& f, const json& s, const std::string& param,
                    std::vector<std::string>* stop) {
  if (!s.is_string()) return f.Fail(WrongType(param, "a string", s));
  const std::string& text = s.get_ref<const std::string&>();
  if (text.empty()) return f.Fail(BadValue(param, "a non-empty stop string", s));
  if (!IsValidUtf8(text)) return f.Fail(InvalidUtf8(param, text));
  stop->push_back(text);
}

void ReadStop(FieldReader& f, const ParseOptions& options, std::vector<std::string>* stop) {
  const json* v = f.ok() ? f.Find("stop") : nullptr;
  if (v == nullptr) return;
  if (v->is_string()) return ReadStopString(f, *v, "stop", stop);
  if (!v->is_array()) return f.Fail(WrongType("stop", "a string or an array of strings", *v));
  if (v->size() > static_cast<size_t>(options.max_stop_sequences)) {
    return f.Fail(InvalidRequest(
        "stop", absl::StrCat("Invalid 'stop': at most ", options.max_stop_sequences,
                             " stop sequences are supported, but got ", v->size(), ".")));
  }
  for (size_t i = 0; i < v->size() && f.ok(); ++i) {
    ReadStopString(f, (*v)[i], absl::StrCat("stop[", i, "]"), stop);
  }
}

// logit_bias: {"token id": bias in [-100, 100], ...} (OpenAI's shape: ids as string keys).
void ReadLogitBias(FieldReader& f, const ParseOptions& options,
                   std::vector<std::pair<int32_t, float>>* out) {
  const json* v = f.ok() ? f.Find("logit_bias") : nullptr;
  if (v == nullptr || v->is_null()) return;
  if (!v->is_object()) return f.Fail(WrongType("logit_bias", "an object of token id -> bias", *v));
  const int64_t hi = options.vocab_size > 0 ? options.vocab_size - 1 : kMaxInt;
  for (const auto& [key, bias] : v->items()) {
    const std::string param = absl::StrCat("logit_bias.", key);
    int64_t id = -1;
    if (key.empty() || key.size() > 10 ||
        key.find_first_not_of("0123456789") != std::string::npos || (id = std::stoll(key)) > hi) {
      return f.Fail(InvalidRequest(
          "logit_bias", absl::StrCat("Invalid 'logit_bias': '", key,
                                     "' is not a token id of this model; keys must be token ids "
                                     "in [0, ",
                                     hi, "].")));
    }
    if (!bias.is_number() || bias.get<double>() < -100 || bias.get<double>() > 100) {
      return f.Fail(BadValue(param, "a number in [-100, 100]", bias));
    }
    out->emplace_back(static_cast<int32_t>(id), bias.get<float>());
  }
  std::sort(out->begin(), out->end());
}

// response_format: {"type": "text"}, {"type": "json_object"} or {"type": "json_schema",
// "json_schema": {"name": ..., "schema": {...}, "strict": ...}}. The schema itself is compiled
// (and refused if unsupported) once the served model is known: generation_input.cpp.
void ReadResponseFormat(FieldReader& f, std::string* schema) {
  const json* v = f.ok() ? f.Find("response_format") : nullptr;
  if (v == nullptr || v->is_null()) return;
  if (!v->is_object()) return f.Fail(WrongType("response_format", "an object", *v));
  FieldReader r(*v, "response_format.");
  std::string type = "text";
  r.String("type", &type);
  if (type == "json_object") {
    *schema = R"({"type":"object"})";
  } else if (type == "json_schema") {
    const json* js = r.ok() ? r.Find("json_schema") : nullptr;
    if (js == nullptr) return f.Fail(MissingField("response_format.json_schema"));
    if (!js->is_object()) return f.Fail(WrongType("response_format.json_schema", "an object", *js));
    FieldReader j(*js, "response_format.json_schema.");
    std::string name, description;  // read so that their types are checked; not used
    bool strict = false;
    j.String("name", &name);
    j.String("description", &description);
    j.Bool("strict", &strict);
    const json* sch = j.ok() ? j.Find("schema") : nullptr;
    *schema = sch == nullptr ? std::string("{}") : sch->dump();
    j.RejectUnread({});
    if (!j.ok()) return f.Fail(j.error());
  } else if (type != "text" && r.ok()) {
    return f.Fail(InvalidRequest("response_format.type",
                                 absl::StrCat("Invalid 'response_format.type': '", type,
                                              "'; use 'text', 'json_object' or 'json_schema'.")));
  }
  r.RejectUnread({});
  if (!r.ok()) f.Fail(r.error());
}

void ReadSampling(FieldReader& f, const ParseOptions& options, SamplingOptions* s) {
  f.Float("temperature", {0.0, 2.0, false, false, "[0, 2]"}, &s->temperature);
  f.Float("top_p", {0.0, 1.0, true, false, "(0, 1]"}, &s->top_p);
  const int64_t top_k_max = options.vocab_size > 0 ? options.vocab_size : kMaxInt;
  if (f.Int("top_k", -1, top_k_max, &s->top_k) && s->top_k == -1) s->top_k = 0;
  f.Float("min_p", {0.0, 1.0, false, false, "[0, 1]"}, &s->min_p);
  f.Float("presence_penalty", {-2.0, 2.0, false, false, "[-2, 2]"}, &s->presence_penalty);
  f.Float("frequency_penalty", {-2.0, 2.0, false, false, "[-2, 2]"}, &s->frequency_penalty);
  f.Float("repetition_penalty", {0.0, 2.0, true, false, "(0, 2]"}, &s->repetition_penalty);
  uint64_t seed = 0;
  if (f.Seed("seed", &seed)) s->seed = seed;
  ReadStop(f, options, &s->stop);
  if (const json* ids = f.ok() ? f.Find("stop_token_ids") : nullptr) {
    ReadTokenIds(f, *ids, "stop_token_ids", options.vocab_size, &s->stop_token_ids);
  }
  f.Bool("ignore_eos", &s->ignore_eos);
  f.Bool("speculative", &s->speculative);
  f.Int("min_tokens", 0, kMaxInt, &s->min_tokens);
  ReadLogitBias(f, options, &s->logit_bias);
  ReadResponseFormat(f, &s->json_schema);
}

// max_tokens (and, for chat, max_completion_tokens, which OpenAI now prefers) in [1, 2^31).
void ReadMaxTokens(FieldReader& f, ApiEndpoint endpoint, std::optional<int>* max_tokens) {
  int n = 0;
  const bool newer =
      endpoint == ApiEndpoint::kChatCompletions && f.Find("max_completion_tokens") != nullptr;
  const char* name = newer ? "max_completion_tokens" : "max_tokens";
  f.Find("max_tokens");  // known either way (the newer name wins when both are sent)
  const json* v = f.ok() ? f.Find(name) : nullptr;
  if (v != nullptr && v->is_number() && v->get<double>() < 1) {
    return f.Fail(InvalidRequest(
        name, absl::StrCat("Invalid '", name, "': expected an integer of at least 1, but got ",
                           JsonPreview(*v),
                           " instead. To score a prompt without generating, send echo=true, "
                           "logprobs and max_tokens=1 to /v1/completions.")));
  }
  if (f.Int(name, 1, kMaxInt, &n)) *max_tokens = n;
}

void ReadStreaming(FieldReader& f, bool* stream, bool* include_usage) {
  f.Bool("stream", stream);
  const json* opts = f.ok() ? f.Find("stream_options") : nullptr;
  if (opts == nullptr) return;
  // vLLM lets an empty stream_options through without stream; OpenAI's SDKs can send one.
  if (!*stream && !opts->empty()) {
    return f.Fail(InvalidRequest("stream_options",
                                 "'stream_options' is only allowed when 'stream' is true; "
                                 "set \"stream\": true or remove 'stream_options'."));
  }
  if (!opts->is_object()) return f.Fail(WrongType("stream_options", "an object", *opts));
  FieldReader o(*opts, "stream_options.");
  o.Bool("include_usage", include_usage);
  o.RejectUnread({});
  if (!o.ok()) f.Fail(o.error());
}

// best_of: only 1 (choices are not ranked here; send n for several).
void ReadOnlyOne(FieldReader& f, const char* name) {
  int n = 1;
  if (!f.Int(name, 0, kMaxInt, &n) || n == 1) return;
  f.Fail(InvalidRequest(
      name, absl::StrCat("Invalid '", name, "': only 1 is supported (choices are not ranked), ",
                         "but got ", n, " instead. Send n for several choices.")));
}

ApiError Unsupported(const std::string& param, std::string_view what) {
  return InvalidRequest(param, absl::StrCat("'", param, "' is not supported by this server (",
                                            std::string(what), "); remove it from the request."));
}

// Fields OpenAI's API (or another client) sends that change nothing here: bookkeeping for the
// caller's own account.
constexpr std::string_view kIgnoredFields[] = {"metadata", "store", "service_tier"};

// Known fields that would change the answer if silently ignored.
void RejectUnsupported(FieldReader& f) {
  ReadOnlyOne(f, "best_of");
  // Set to something other than its "off" value (null, "", [], {}, false).
  auto non_empty = [&](const char* name) {
    const json* v = f.ok() ? f.Find(name) : nullptr;
    if (v == nullptr) return false;
    if (v->is_string()) return !v->get_ref<const std::string&>().empty();
    if (v->is_boolean()) return v->get<bool>();
    return !v->empty();
  };
  if (non_empty("suffix")) f.Fail(Unsupported("suffix", "no fill-in-the-middle"));
  if (non_empty("functions")) {
    f.Fail(Unsupported("functions", "the deprecated form of 'tools'; send 'tools' instead"));
  }
  if (non_empty("use_beam_search")) f.Fail(Unsupported("use_beam_search", "no beam search"));
}

void ReadChatLogprobs(FieldReader& f, const ParseOptions& options, ChatCompletionRequest* r) {
  f.Bool("logprobs", &r->logprobs);
  if (f.Int("top_logprobs", 0, options.max_logprobs, &r->top_logprobs) && r->top_logprobs > 0 &&
      !r->logprobs) {
    f.Fail(InvalidRequest("top_logprobs",
                          "'top_logprobs' needs 'logprobs': set \"logprobs\": true as well."));
  }
}

// One prompt (`param` names it in errors): a non-empty string or token-id array.
void ReadOnePrompt(FieldReader& f, const ParseOptions& options, const json& one,
                   const std::string& param, CompletionPrompt* out) {
  const bool empty =
      one.is_string() ? one.get_ref<const std::string&>().empty() : one.is_array() && one.empty();
  if (empty) {
    return f.Fail(InvalidRequest(param, absl::StrCat("Invalid '", param,
                                                     "': the prompt is "
                                                     "empty. Send at least one character or "
                                                     "token id.")));
  }
  if (one.is_string()) {
    const std::string& s = one.get_ref<const std::string&>();
    if (!IsValidUtf8(s)) return f.Fail(InvalidUtf8(param, s));
    *out = s;
  } else if (one.is_array()) {
    std::vector<int32_t> ids;
    ReadTokenIds(f, one, param, options.vocab_size, &ids);
    *out = std::move(ids);
  } else {
    f.Fail(WrongType(param, "a string or an array of token ids", one));
  }
}

// The prompts of a completion: one string, one token-id array, or an array of either (each its
// own prompt, at most max_choices / n of them).
void ReadPrompt(FieldReader& f, const ParseOptions& options, CompletionRequest* r) {
  const json* v = f.ok() ? f.Find("prompt") : nullptr;
  if (v == nullptr) return f.Fail(MissingField("prompt"));
  if (!v->is_array() || v->empty() || (*v)[0].is_number()) {
    return ReadOnePrompt(f, options, *v, "prompt", &r->prompt);
  }
  const size_t most = static_cast<size_t>(options.max_choices / std::max(r->n, 1));
  if (v->size() > most) {
    return f.Fail(InvalidRequest(
        "prompt",
        absl::StrCat("Invalid 'prompt': ", v->size(), " prompts with n = ", r->n, " make ",
                     v->size() * r->n, " choices, more than the ", options.max_choices,
                     " one request may have. Send the prompts in several requests.")));
  }
  r->more_prompts.resize(v->size() - 1);
  for (size_t i = 0; i < v->size() && f.ok(); ++i) {
    ReadOnePrompt(f, options, (*v)[i], absl::StrCat("prompt[", i, "]"),
                  i == 0 ? &r->prompt : &r->more_prompts[i - 1]);
  }
}

// n: choices per prompt, in [1, max_choices].
void ReadChoiceCount(FieldReader& f, const ParseOptions& options, int* n) {
  if (!f.Int("n", 1, kMaxInt, n) || *n <= options.max_choices) return;
  f.Fail(InvalidRequest("n", absl::StrCat("Invalid 'n': at most ", options.max_choices,
                                          " choices per request are supported, but got ", *n,
                                          " instead. Send the choices in several requests.")));
}

}  // namespace

// Templates print tools and kwargs with |tojson in the client's key order (as transformers
// does with Python dicts), which `json` (sorted keys) loses: take those two from an ordered
// parse of the same, already validated body.
void KeepClientKeyOrder(std::string_view body, ChatCompletionRequest* r) {
  if (r->tools.is_null() && r->template_kwargs.is_null()) return;
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body, nullptr, false);
  if (!r->tools.is_null()) r->tools = ordered.at("tools");
  if (r->template_kwargs.is_null()) return;
  nlohmann::ordered_json kwargs = ordered.at("chat_template_kwargs");
  kwargs.erase("enable_thinking");
  r->template_kwargs = std::move(kwargs);
}

namespace {

// Strict schemas emit properties in declared order: take the schema from an ordered parse.
void KeepSchemaKeyOrder(std::string_view body, SamplingOptions* s) {
  if (s->json_schema.empty()) return;
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body, nullptr, false);
  const auto& format = ordered.at("response_format");
  if (format.value("type", "") != "json_schema") return;
  const auto& js = format.at("json_schema");
  if (js.contains("schema")) s->json_schema = js.at("schema").dump();
}

}  // namespace

ApiResult<json> ParseJsonBody(std::string_view body, size_t max_depth) {
  if (body.empty()) {
    return InvalidRequest("", "The request body is empty. Send a JSON object.");
  }
  Utf8Problem problem;
  if (!IsValidUtf8(body, &problem)) {
    return InvalidRequest(
        "", absl::StrCat("The request body is not valid UTF-8 (", std::string(problem.what),
                         " at byte ", problem.offset, "). Send the JSON encoded as UTF-8."));
  }
  if (NestsDeeperThan(body, max_depth)) {
    return InvalidRequest("", absl::StrCat("The request body nests arrays/objects more than ",
                                           max_depth, " levels deep. Send a flatter request."));
  }
  json parsed;
  try {
    parsed = json::parse(body);
  } catch (const json::exception& e) {
    // parse_error for syntax; out_of_range for a number like 1e400 that overflows a double.
    return InvalidRequest(
        "", absl::StrCat("The request body is not valid JSON (", ParserReason(e.what()),
                         "). Send a JSON object with Content-Type: "
                         "application/json."));
  }
  if (!parsed.is_object()) {
    return InvalidRequest("", absl::StrCat("The request body must be a JSON object, but got ",
                                           std::string(JsonTypeName(parsed)), "."));
  }
  return parsed;
}

ApiResult<ChatCompletionRequest> ChatCompletionRequestFromJson(const json& body,
                                                               const ParseOptions& options) {
  if (!body.is_object()) return WrongType("", "a JSON object", body);
  ChatCompletionRequest r;
  FieldReader f(body);
  ReadModel(f, options, &r.model);
  ReadChatFields(f, &r);
  ReadSampling(f, options, &r.sampling);
  ReadMaxTokens(f, ApiEndpoint::kChatCompletions, &r.sampling.max_tokens);
  ReadStreaming(f, &r.stream, &r.include_usage);
  ReadChatLogprobs(f, options, &r);
  ReadChoiceCount(f, options, &r.n);
  RejectUnsupported(f);
  f.String("user", &r.user);
  f.RejectUnread(kIgnoredFields);
  if (!f.ok()) return f.error();
  return r;
}

ApiResult<CompletionRequest> CompletionRequestFromJson(const json& body,
                                                       const ParseOptions& options) {
  if (!body.is_object()) return WrongType("", "a JSON object", body);
  CompletionRequest r;
  FieldReader f(body);
  ReadModel(f, options, &r.model);
  ReadChoiceCount(f, options, &r.n);
  ReadPrompt(f, options, &r);
  ReadSampling(f, options, &r.sampling);
  r.sampling.max_tokens = 16;  // OpenAI's default for completions
  ReadMaxTokens(f, ApiEndpoint::kCompletions, &r.sampling.max_tokens);
  ReadStreaming(f, &r.stream, &r.include_usage);
  int logprobs = 0;
  if (f.Int("logprobs", 0, options.max_logprobs, &logprobs)) r.logprobs = logprobs;
  f.Bool("echo", &r.echo);
  RejectUnsupported(f);
  f.String("user", &r.user);
  f.RejectUnread(kIgnoredFields);
  if (!f.ok()) return f.error();
  return r;
}

ApiResult<ChatCompletionRequest> ParseChatCompletionRequest(std::string_view body,
                                                            const ParseOptions& options) {
  ApiResult<json> parsed = ParseJsonBody(body, options.max_json_depth);
  if (!parsed.ok()) return parsed.error();
  ApiResult<ChatCompletionRequest> r = ChatCompletionRequestFromJson(*parsed, options);
  if (!r.ok()) return r;
  ChatCompletionRequest request = std::move(r).value();
  KeepClientKeyOrder(body, &request);
  KeepSchemaKeyOrder(body, &request.sampling);
  return request;
}

ApiResult<CompletionRequest> ParseCompletionRequest(std::string_view body,
                                                    const ParseOptions& options) {
  ApiResult<json> parsed = ParseJsonBody(body, options.max_json_depth);
  if (!parsed.ok()) return parsed.error();
  ApiResult<CompletionRequest> r = CompletionRequestFromJson(*parsed, options);
  if (!r.ok()) return r;
  CompletionRequest request = std::move(r).value();
  KeepSchemaKeyOrder(body, &request.sampling);
  return request;
}

ApiError PromptTooLong(int prompt_tokens, int max_tokens, int context, ApiEndpoint endpoint) {
  const bool chat = endpoint == ApiEndpoint::kChatCompletions;
  const char* what = chat ? "messages" : "prompt";
  std::string message;
  if (max_tokens <= 0) {
    message = absl::StrCat("This model's maximum context length is ", context,
                           " tokens. However, your ", what, " resulted in ", prompt_tokens,
                           " tokens, which leaves no room for the completion. Please reduce the "
                           "length of the ",
                           what, ".");
  } else {
    message = absl::StrCat("This model's maximum context length is ", context,
                           " tokens. However, you requested ", int64_t{prompt_tokens} + max_tokens,
                           " tokens (", prompt_tokens, " in the ", what, ", ", max_tokens,
                           " in the completion). Please reduce the length of the ", what,
                           " or completion.");
  }
  return InvalidRequest(what, std::move(message), "context_length_exceeded");
}

ApiResult<int> ResolveMaxTokens(std::optional<int> requested, int prompt_tokens, int context,
                                ApiEndpoint endpoint) {
  const int64_t room = int64_t{context} - prompt_tokens;
  if (room <= 0) return PromptTooLong(prompt_tokens, 0, context, endpoint);
  if (!requested.has_value()) return static_cast<int>(room);
  if (*requested > room) return PromptTooLong(prompt_tokens, *requested, context, endpoint);
  return *requested;
}

}  // namespace dq::router
