#include "router/openai_response.h"

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "router/utf8.h"

namespace dq::router {
namespace {

using ojson = nlohmann::ordered_json;

// vLLM's stand-in for -inf: JSON has no infinity, and clients expect a number.
constexpr double kMinLogprob = -9999.0;

// The float's shortest decimal form as a double, so -0.1f prints as -0.1 and not as
// -0.10000000149011612 (its exact value as a double).
double JsonLogprob(float f) {
  if (std::isnan(f)) return static_cast<double>(f);  // dumps as null
  if (!(f > kMinLogprob)) return kMinLogprob;
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf) - 1, f);
  if (ec != std::errc()) return static_cast<double>(f);
  *end = '\0';
  return std::strtod(buf, nullptr);
}

ojson ByteArray(std::string_view bytes) {
  ojson out = ojson::array();
  for (char c : bytes) out.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return out;
}

ojson ChatLogprobEntry(std::string_view bytes, float logprob) {
  ojson e;
  e["token"] = ToValidUtf8(bytes);
  e["logprob"] = JsonLogprob(logprob);
  e["bytes"] = ByteArray(bytes);
  return e;
}

// {token: logprob} over the alternatives and the chosen token; a repeated string keeps the
// higher logprob, so "is the chosen token the most likely" stays answerable from the dict.
ojson TopLogprobsDict(const TokenLogprobs& t) {
  ojson dict = ojson::object();
  auto put = [&](std::string_view bytes, float logprob) {
    const std::string key = ToValidUtf8(bytes);
    const double value = JsonLogprob(logprob);
    auto it = dict.find(key);
    if (it == dict.end()) {
      dict[key] = value;
    } else if (value > it->get<double>()) {
      *it = value;
    }
  };
  for (const LogprobCandidate& c : t.top) put(c.bytes, c.logprob);
  put(t.bytes, *t.logprob);
  return dict;
}

ojson UsageJson(const Usage& usage) {
  ojson u;
  u["prompt_tokens"] = usage.prompt_tokens;
  u["completion_tokens"] = usage.completion_tokens;
  u["total_tokens"] = int64_t{usage.prompt_tokens} + usage.completion_tokens;
  u["prompt_tokens_details"] = ojson{{"cached_tokens", usage.cached_tokens}};
  if (const auto& spec = usage.speculative) {
    ojson sp;
    sp["steps"] = spec->steps;
    sp["drafted_tokens"] = spec->drafted;
    sp["accepted_tokens"] = spec->accepted;
    sp["acceptance_rate"] = spec->drafted > 0 ? double(spec->accepted) / spec->drafted : 0.0;
    // Each step emits its accepted tokens plus the target's own one.
    sp["acceptance_length"] =
        spec->steps > 0 ? double(spec->accepted + spec->steps) / spec->steps : 0.0;
    if (!spec->drafter_prompt.empty()) sp["drafter_prompt"] = spec->drafter_prompt;
    u["speculative"] = std::move(sp);
  }
  return u;
}

ojson Envelope(const ResponseHeader& header, std::string_view object) {
  ojson j;
  j["id"] = header.id;
  j["object"] = std::string(object);
  j["created"] = header.created;
  j["model"] = header.model;
  return j;
}

std::string Dump(const ojson& j) {
  // Never throw on text a caller failed to repair; U+FFFD is what a client would see anyway.
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace

std::string RandomAlphanumerics(size_t n) {
  static constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  std::string s(n, ' ');
  for (char& c : s) c = kAlphabet[pick(rng)];
  return s;
}

ResponseHeader NewResponseHeader(ApiEndpoint endpoint, std::string model) {
  const char* prefix = endpoint == ApiEndpoint::kChatCompletions ? "chatcmpl-" : "cmpl-";
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return ResponseHeader{absl::StrCat(prefix, RandomAlphanumerics(24)),
                        std::chrono::duration_cast<std::chrono::seconds>(now).count(),
                        std::move(model)};
}

ojson ChatLogprobsJson(std::span<const TokenLogprobs> tokens) {
  ojson content = ojson::array();
  for (const TokenLogprobs& t : tokens) {
    ojson e = ChatLogprobEntry(t.bytes, t.logprob.value_or(-INFINITY));
    ojson top = ojson::array();
    for (const LogprobCandidate& c : t.top) top.push_back(ChatLogprobEntry(c.bytes, c.logprob));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  ojson out;
  out["content"] = std::move(content);
  return out;
}

ojson CompletionLogprobsJson(std::span<const TokenLogprobs> tokens, size_t text_offset_start) {
  ojson offsets = ojson::array(), logprobs = ojson::array(), strings = ojson::array(),
        tops = ojson::array();
  size_t offset = text_offset_start;
  for (const TokenLogprobs& t : tokens) {
    std::string text = ToValidUtf8(t.bytes);
    offsets.push_back(offset);
    offset += CountCodePoints(text);
    strings.push_back(std::move(text));
    if (t.logprob.has_value()) {
      logprobs.push_back(JsonLogprob(*t.logprob));
      tops.push_back(TopLogprobsDict(t));
    } else {
      logprobs.push_back(nullptr);
      tops.push_back(nullptr);
    }
  }
  ojson out;
  out["text_offset"] = std::move(offsets);
  out["token_logprobs"] = std::move(logprobs);
  out["tokens"] = std::move(strings);
  out["top_logprobs"] = std::move(tops);
  return out;
}

void PrependEcho(std::string_view prompt_text, std::vector<TokenLogprobs> prompt_logprobs,
                 CompletionChoice* choice) {
  choice->text.insert(0, prompt_text);
  if (!choice->logprobs.has_value()) return;
  prompt_logprobs.insert(prompt_logprobs.end(), std::make_move_iterator(choice->logprobs->begin()),
                         std::make_move_iterator(choice->logprobs->end()));
  *choice->logprobs = std::move(prompt_logprobs);
}

namespace {

ojson ToolCallJson(const ChatToolCall& call) {
  ojson j;
  j["id"] = call.id;
  j["type"] = "function";
  j["function"]["name"] = call.name;
  j["function"]["arguments"] = call.arguments;
  return j;
}

ojson ChatChoiceJson(const ChatChoice& choice, size_t index) {
  ojson c;
  c["index"] = index;
  c["message"]["role"] = "assistant";
  // OpenAI: an answer that is only tool calls has content null.
  const bool no_content = choice.content.empty() && !choice.tool_calls.empty();
  c["message"]["content"] = no_content ? ojson(nullptr) : ojson(choice.content);
  if (!choice.tool_calls.empty()) {
    ojson calls = ojson::array();
    for (const ChatToolCall& call : choice.tool_calls) calls.push_back(ToolCallJson(call));
    c["message"]["tool_calls"] = std::move(calls);
  }
  c["logprobs"] = choice.logprobs ? ChatLogprobsJson(*choice.logprobs) : ojson(nullptr);
  c["finish_reason"] = std::string(FinishReasonName(choice.finish_reason));
  return c;
}

ojson CompletionChoiceJson(const CompletionChoice& choice, size_t index) {
  ojson c;
  c["index"] = index;
  c["text"] = choice.text;
  c["logprobs"] = choice.logprobs ? CompletionLogprobsJson(*choice.logprobs) : ojson(nullptr);
  c["finish_reason"] = std::string(FinishReasonName(choice.finish_reason));
  return c;
}

}  // namespace

std::string ChatCompletionJson(const ResponseHeader& header, std::span<const ChatChoice> choices,
                               const Usage& usage) {
  ojson j = Envelope(header, "chat.completion");
  j["choices"] = ojson::array();
  for (size_t i = 0; i < choices.size(); ++i) j["choices"].push_back(ChatChoiceJson(choices[i], i));
  j["usage"] = UsageJson(usage);
  return Dump(j);
}

std::string ChatCompletionJson(const ResponseHeader& header, const ChatChoice& choice,
                               const Usage& usage) {
  return ChatCompletionJson(header, std::span<const ChatChoice>(&choice, 1), usage);
}

std::string CompletionJson(const ResponseHeader& header, std::span<const CompletionChoice> choices,
                           const Usage& usage) {
  ojson j = Envelope(header, "text_completion");
  j["choices"] = ojson::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    j["choices"].push_back(CompletionChoiceJson(choices[i], i));
  }
  j["usage"] = UsageJson(usage);
  return Dump(j);
}

std::string CompletionJson(const ResponseHeader& header, const CompletionChoice& choice,
                           const Usage& usage) {
  return CompletionJson(header, std::span<const CompletionChoice>(&choice, 1), usage);
}

std::string SseData(const ojson& payload) { return absl::StrCat("data: ", Dump(payload), "\n\n"); }

std::string SseError(const ApiError& error) {
  return absl::StrCat("data: ", error.ToJson(), "\n\n");
}

std::string SseDone() { return "data: [DONE]\n\n"; }

ChatCompletionStream::ChatCompletionStream(ResponseHeader header, bool include_usage, bool logprobs,
                                           int index)
    : header_(std::move(header)),
      include_usage_(include_usage),
      logprobs_(logprobs),
      index_(index) {}

ojson ChatCompletionStream::Chunk(ojson choices) const {
  ojson j = Envelope(header_, "chat.completion.chunk");
  j["choices"] = std::move(choices);
  if (include_usage_) j["usage"] = nullptr;
  return j;
}

std::string ChatCompletionStream::RoleChunk() const {
  ojson c;
  c["index"] = index_;
  c["delta"]["role"] = "assistant";
  c["delta"]["content"] = "";
  c["logprobs"] = nullptr;
  c["finish_reason"] = nullptr;
  return SseData(Chunk(ojson::array({std::move(c)})));
}

std::string ChatCompletionStream::ContentChunk(std::string_view text,
                                               std::span<const TokenLogprobs> logprobs) const {
  ojson c;
  c["index"] = index_;
  c["delta"]["content"] = std::string(text);
  c["logprobs"] = logprobs_ ? ChatLogprobsJson(logprobs) : ojson(nullptr);
  c["finish_reason"] = nullptr;
  return SseData(Chunk(ojson::array({std::move(c)})));
}

std::string ChatCompletionStream::ToolCallChunk(const ChatToolCall& call) {
  ojson entry;
  entry["index"] = tool_calls_++;
  const ojson fields = ToolCallJson(call);
  for (const auto& [key, value] : fields.items()) entry[key] = value;
  ojson c;
  c["index"] = index_;
  c["delta"]["tool_calls"] = ojson::array({std::move(entry)});
  c["logprobs"] = nullptr;
  c["finish_reason"] = nullptr;
  return SseData(Chunk(ojson::array({std::move(c)})));
}

std::string ChatCompletionStream::FinishChunk(FinishReason reason) const {
  ojson c;
  c["index"] = index_;
  c["delta"] = ojson::object();
  c["logprobs"] = nullptr;
  c["finish_reason"] = std::string(FinishReasonName(reason));
  return SseData(Chunk(ojson::array({std::move(c)})));
}

std::string ChatCompletionStream::UsageChunk(const Usage& usage) const {
  if (!include_usage_) return "";
  ojson j = Chunk(ojson::array());
  j["usage"] = UsageJson(usage);
  return SseData(j);
}

CompletionStream::CompletionStream(ResponseHeader header, bool include_usage, bool logprobs,
                                   int index)
    : header_(std::move(header)),
      include_usage_(include_usage),
      logprobs_(logprobs),
      index_(index) {}

ojson CompletionStream::Chunk(ojson choices) const {
  ojson j = Envelope(header_, "text_completion");
  j["choices"] = std::move(choices);
  if (include_usage_) j["usage"] = nullptr;
  return j;
}

std::string CompletionStream::TextChunk(std::string_view text,
                                        std::span<const TokenLogprobs> logprobs) {
  ojson c;
  c["index"] = index_;
  c["text"] = std::string(text);
  c["logprobs"] = logprobs_ ? CompletionLogprobsJson(logprobs, text_offset_) : ojson(nullptr);
  c["finish_reason"] = nullptr;
  text_offset_ += CountCodePoints(text);
  return SseData(Chunk(ojson::array({std::move(c)})));
}

std::string CompletionStream::FinishChunk(FinishReason reason) const {
  ojson c;
  c["index"] = index_;
  c["text"] = "";
  c["logprobs"] = nullptr;
  c["finish_reason"] = std::string(FinishReasonName(reason));
  return SseData(Chunk(ojson::array({std::move(c)})));
}

std::string CompletionStream::UsageChunk(const Usage& usage) const {
  if (!include_usage_) return "";
  ojson j = Chunk(ojson::array());
  j["usage"] = UsageJson(usage);
  return SseData(j);
}

}  // namespace dq::router
