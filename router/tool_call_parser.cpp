#include "router/tool_call_parser.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "router/openai_response.h"

namespace dq::router {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kWhitespace = " \t\r\n";
constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId =
    "[CALL_ID]";  // Mistral Small 3.2: name[CALL_ID]id[ARGS]

std::string_view Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(kWhitespace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kWhitespace) - b + 1);
}

// The longest suffix of `s` that is a proper prefix of `marker`: text that may still become it.
size_t PartialMarkerSuffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// One past the '}' that closes the object opening at s[at] (strings and escapes skipped), or npos.
size_t ObjectEnd(std::string_view s, size_t at) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = at; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

struct Call {
  std::string name;
  std::string arguments;  // compact JSON text
};

// `arguments` as JSON text: an object, or a string holding one (some models quote it); null is
// no arguments.
std::optional<std::string> ArgumentsText(const ojson& args) {
  if (args.is_null()) return "{}";
  if (args.is_object()) return args.dump(-1, ' ', false, ojson::error_handler_t::replace);
  if (!args.is_string()) return std::nullopt;
  const ojson inner = ojson::parse(args.get<std::string>(), nullptr, false);
  if (!inner.is_object()) return std::nullopt;
  return inner.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

// {"name": "...", "arguments" | "parameters": {...}}; no arguments is {}.
std::optional<Call> CallFromJson(const ojson& j) {
  if (!j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return std::nullopt;
  }
  std::optional<std::string> args = "{}";
  if (j.contains("arguments")) {
    args = ArgumentsText(j["arguments"]);
  } else if (j.contains("parameters")) {
    args = ArgumentsText(j["parameters"]);
  }
  if (!args) return std::nullopt;
  return Call{name->get<std::string>(), *std::move(args)};
}

std::optional<Call> CallFromText(std::string_view text) {
  return CallFromJson(ojson::parse(Trim(text), nullptr, false));
}

// Llama 3: [<|python_tag|>] object (; object)*.
std::optional<std::vector<Call>> Llama3Calls(std::string_view text) {
  text = Trim(text);
  if (text.starts_with(kPythonTag)) text = Trim(text.substr(kPythonTag.size()));
  std::vector<Call> calls;
  size_t at = 0;
  while (at < text.size()) {
    if (text[at] != '{') return std::nullopt;
    const size_t end = ObjectEnd(text, at);
    if (end == std::string_view::npos) return std::nullopt;
    std::optional<Call> c = CallFromText(text.substr(at, end - at));
    if (!c) return std::nullopt;
    calls.push_back(*std::move(c));
    at = text.find_first_not_of(kWhitespace, end);
    if (at == std::string_view::npos) break;
    if (text[at] != ';') return std::nullopt;
    at = text.find_first_not_of(kWhitespace, at + 1);
    if (at == std::string_view::npos) break;
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

// Mistral, after the first [TOOL_CALLS]: a JSON array of calls, or name[ARGS]{...} pieces each
// after its own [TOOL_CALLS].
std::optional<std::vector<Call>> MistralCalls(std::string_view text) {
  text = Trim(text);
  std::vector<Call> calls;
  if (text.starts_with("[")) {
    const ojson list = ojson::parse(text, nullptr, false);
    if (!list.is_array() || list.empty()) return std::nullopt;
    for (const ojson& item : list) {
      std::optional<Call> c = CallFromJson(item);
      if (!c) return std::nullopt;
      calls.push_back(*std::move(c));
    }
    return calls;
  }
  while (!text.empty()) {
    const size_t next = text.find(kMistralCalls);
    std::string_view piece = Trim(text.substr(0, next));
    text = next == std::string_view::npos ? std::string_view()
                                          : text.substr(next + kMistralCalls.size());
    const size_t args = piece.find(kMistralArgs);
    if (args == std::string_view::npos) return std::nullopt;
    // The model's own call id is dropped: ids are the server's to make unique.
    const size_t name_end = std::min(args, piece.find(kMistralCallId));
    ojson j = {{"name", std::string(Trim(piece.substr(0, name_end)))}};
    j["arguments"] = ojson::parse(piece.substr(args + kMistralArgs.size()), nullptr, false);
    std::optional<Call> c = CallFromJson(j);
    if (!c) return std::nullopt;
    calls.push_back(*std::move(c));
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

}  // namespace

std::optional<ToolCallFormat> DetectToolCallFormat(std::string_view source) {
  if (source.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (source.find(kMistralCalls) != std::string_view::npos) return ToolCallFormat::kMistral;
  const bool llama3 = source.find("<|start_header_id|>") != std::string_view::npos;
  if (llama3 && (source.find(kPythonTag) != std::string_view::npos ||
                 source.find("\"parameters\"") != std::string_view::npos)) {
    return ToolCallFormat::kLlama3Json;
  }
  return std::nullopt;
}

absl::StatusOr<ToolCallFormat> ToolCallFormatNamed(std::string_view name) {
  for (ToolCallFormat f :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    if (name == ToolCallFormatName(f)) return f;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown tool-call format '", std::string(name),
                                                 "'; use hermes, llama3_json or mistral"));
}

std::string_view ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kMistral:
      return "mistral";
  }
  return "hermes";
}

std::vector<std::string> ToolCallMarkers(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return {std::string(kHermesOpen), std::string(kHermesClose)};
    case ToolCallFormat::kLlama3Json:
      return {std::string(kPythonTag)};
    case ToolCallFormat::kMistral:
      return {std::string(kMistralCalls), std::string(kMistralArgs), std::string(kMistralCallId)};
  }
  return {};
}

ToolCallParser::ToolCallParser(ToolCallFormat format, int max_calls)
    : format_(format), max_calls_(max_calls) {}

void ToolCallParser::EmitContent(std::string text, Output& out) {
  const size_t last = text.find_last_not_of(kWhitespace);
  if (last == std::string::npos) {
    space_ += text;
    return;
  }
  out.content += space_;
  out.content.append(text, 0, last + 1);
  space_ = text.substr(last + 1);
}

void ToolCallParser::AddCall(std::string name, std::string arguments, Output& out) {
  if (max_calls_ > 0 && calls_ >= max_calls_) return;
  ++calls_;
  std::string id = format_ == ToolCallFormat::kMistral ? RandomAlphanumerics(9)
                                                       : "call_" + RandomAlphanumerics(24);
  out.calls.push_back({std::move(id), std::move(name), std::move(arguments)});
}

void ToolCallParser::FeedHermes(Output& out) {
  while (true) {
    if (!in_call_) {
      const size_t at = buffer_.find(kHermesOpen);
      if (at == std::string::npos) {
        const size_t keep = PartialMarkerSuffix(buffer_, kHermesOpen);
        EmitContent(buffer_.substr(0, buffer_.size() - keep), out);
        buffer_.erase(0, buffer_.size() - keep);
        return;
      }
      EmitContent(buffer_.substr(0, at), out);
      buffer_.erase(0, at);  // the marker stays, so text that is no call comes back whole
      in_call_ = true;
    }
    const size_t close = buffer_.find(kHermesClose, kHermesOpen.size());
    if (close == std::string::npos) return;
    const size_t end = close + kHermesClose.size();
    std::optional<Call> c = CallFromText(
        std::string_view(buffer_).substr(kHermesOpen.size(), close - kHermesOpen.size()));
    if (c) {
      AddCall(std::move(c->name), std::move(c->arguments), out);
    } else {
      EmitContent(buffer_.substr(0, end), out);
    }
    buffer_.erase(0, end);
    in_call_ = false;
  }
}

ToolCallParser::Output ToolCallParser::Feed(std::string_view text) {
  Output out;
  buffer_.append(text);
  if (format_ == ToolCallFormat::kHermes) {
    FeedHermes(out);
    return out;
  }
  if (whole_) return out;
  if (format_ == ToolCallFormat::kLlama3Json && !decided_) {
    const size_t first = buffer_.find_first_not_of(kWhitespace);
    if (first == std::string::npos) return out;
    const std::string_view rest = std::string_view(buffer_).substr(first);
    if (rest.size() < kPythonTag.size() && kPythonTag.starts_with(rest)) return out;
    decided_ = true;
    whole_ = rest.starts_with("{") || rest.starts_with(kPythonTag);
    if (whole_) return out;
  }
  size_t keep = 0;
  if (format_ == ToolCallFormat::kMistral) {
    const size_t at = buffer_.find(kMistralCalls);
    if (at != std::string::npos) {
      EmitContent(buffer_.substr(0, at), out);
      buffer_.erase(0, at);
      whole_ = true;
      return out;
    }
    keep = PartialMarkerSuffix(buffer_, kMistralCalls);
  }
  EmitContent(buffer_.substr(0, buffer_.size() - keep), out);
  buffer_.erase(0, buffer_.size() - keep);
  return out;
}

void ToolCallParser::FinishWhole(Output& out) {
  std::optional<std::vector<Call>> calls =
      format_ == ToolCallFormat::kLlama3Json
          ? Llama3Calls(buffer_)
          : MistralCalls(std::string_view(buffer_).substr(kMistralCalls.size()));
  if (!calls) return EmitContent(std::move(buffer_), out);
  for (Call& c : *calls) AddCall(std::move(c.name), std::move(c.arguments), out);
}

ToolCallParser::Output ToolCallParser::Finish() {
  Output out;
  if (format_ == ToolCallFormat::kHermes && in_call_) {
    // A call the model did not close (it stopped right after the JSON) still counts.
    std::optional<Call> c = CallFromText(std::string_view(buffer_).substr(kHermesOpen.size()));
    if (c) {
      AddCall(std::move(c->name), std::move(c->arguments), out);
    } else {
      EmitContent(std::move(buffer_), out);
    }
  } else if (whole_) {
    FinishWhole(out);
  } else {
    EmitContent(std::move(buffer_), out);
  }
  buffer_.clear();
  in_call_ = false;
  whole_ = false;
  // Whitespace around calls is layout, not an answer.
  if (calls_ == 0) out.content += space_;
  space_.clear();
  return out;
}

}  // namespace dq::router
