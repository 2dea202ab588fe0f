#include "router/chat_request.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "router/utf8.h"

namespace dq::router {
namespace {

using nlohmann::json;

// Names the template passes itself; a kwarg of the same name would be ignored (transformers
// refuses it), so it is refused here.
constexpr std::string_view kTemplateVariables[] = {
    "messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token"};

// The text of a message: a string, or text parts joined with "\n" (what vLLM does).
void ReadContent(FieldReader& f, const json& content, const std::string& param, std::string* out) {
  if (content.is_string()) {
    const std::string& s = content.get_ref<const std::string&>();
    if (!IsValidUtf8(s)) return f.Fail(InvalidUtf8(param, s));
    *out = s;
    return;
  }
  if (!content.is_array()) {
    return f.Fail(WrongType(param, "a string or an array of content parts", content));
  }
  std::vector<std::string> texts;
  for (size_t i = 0; i < content.size() && f.ok(); ++i) {
    const std::string part_param = absl::StrCat(param, "[", i, "]");
    if (!content[i].is_object()) return f.Fail(WrongType(part_param, "an object", content[i]));
    FieldReader part(content[i], part_param + ".");
    std::string type, text;
    if (!part.String("type", &type) && part.ok()) part.Fail(MissingField(part.Param("type")));
    if (part.ok() && type != "text") {
      part.Fail(InvalidRequest(part.Param("type"),
                               absl::StrCat("Invalid value for '", part.Param("type"), "': '", type,
                                            "' is not supported; this server accepts "
                                            "text parts ({\"type\": \"text\"}) only.")));
    }
    if (part.ok() && !part.String("text", &text) && part.ok()) {
      part.Fail(MissingField(part.Param("text")));
    }
    if (!part.ok()) return f.Fail(part.error());
    texts.push_back(std::move(text));
  }
  *out = absl::StrJoin(texts, "\n");
}

// OpenAI's function-name rule: 1 to 64 of a-z, A-Z, 0-9, _ and -.
bool IsFunctionName(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

void ReadFunctionName(FieldReader& f, std::string* name) {
  if (!f.String("name", name) && f.ok()) return f.Fail(MissingField(f.Param("name")));
  if (f.ok() && !IsFunctionName(*name)) {
    f.Fail(BadValue(f.Param("name"), "a name of 1 to 64 letters, digits, '_' or '-'", *name));
  }
}

// {id, type: "function", function: {name, arguments}} of an assistant turn.
void ReadToolCall(FieldReader& f, const json& c, const std::string& param, ChatToolCall* out) {
  if (!c.is_object()) return f.Fail(WrongType(param, "an object", c));
  FieldReader r(c, param + ".");
  std::string type = "function";
  r.String("id", &out->id);
  r.String("type", &type);
  if (r.ok() && type != "function") {
    r.Fail(BadValue(r.Param("type"), "\"function\"", type));
  }
  const json* fn = r.ok() ? r.Find("function") : nullptr;
  if (fn == nullptr && r.ok()) r.Fail(MissingField(r.Param("function")));
  if (fn != nullptr && !fn->is_object()) r.Fail(WrongType(r.Param("function"), "an object", *fn));
  if (r.ok()) {
    FieldReader fr(*fn, r.Param("function."));
    ReadFunctionName(fr, &out->name);
    if (!fr.String("arguments", &out->arguments) && fr.ok()) {
      fr.Fail(MissingField(fr.Param("arguments")));
    }
    fr.RejectUnread({});
    if (!fr.ok()) r.Fail(fr.error());
  }
  r.RejectUnread({});
  if (!r.ok()) f.Fail(r.error());
}

void ReadToolCalls(FieldReader& r, ChatMessage* out) {
  const json* calls = r.ok() ? r.Find("tool_calls") : nullptr;
  if (calls == nullptr) return;
  if (out->role != "assistant") {
    return r.Fail(
        InvalidRequest(r.Param("tool_calls"), "Only assistant messages can have 'tool_calls'."));
  }
  if (!calls->is_array()) return r.Fail(WrongType(r.Param("tool_calls"), "an array", *calls));
  out->tool_calls.resize(calls->size());
  for (size_t i = 0; i < calls->size() && r.ok(); ++i) {
    ReadToolCall(r, (*calls)[i], absl::StrCat(r.Param("tool_calls"), "[", i, "]"),
                 &out->tool_calls[i]);
  }
}

void CheckRole(FieldReader& r, std::string* role) {
  if (*role == "developer") *role = "system";
  const bool known =
      *role == "system" || *role == "user" || *role == "assistant" || *role == "tool";
  if (known) return;
  r.Fail(InvalidRequest(
      r.Param("role"),
      absl::StrCat("Invalid value for '", r.Param("role"), "': '", *role, "'. ",
                   *role == "function" ? "Function messages are the deprecated form of tool "
                                         "messages; send {\"role\": \"tool\", ...} instead. "
                                       : "",
                   "Supported values are: 'system', 'developer', 'user', 'assistant' and "
                   "'tool'.")));
}

void ReadMessage(FieldReader& f, const json& m, size_t index, ChatMessage* out) {
  const std::string param = absl::StrCat("messages[", index, "]");
  if (!m.is_object()) return f.Fail(WrongType(param, "an object", m));
  FieldReader r(m, param + ".");
  if (!r.String("role", &out->role) && r.ok()) r.Fail(MissingField(r.Param("role")));
  if (r.ok()) CheckRole(r, &out->role);
  const json* content = r.ok() ? r.Find("content") : nullptr;
  if (content != nullptr) {
    ReadContent(r, *content, r.Param("content"), &out->content);
  } else if (r.ok() && out->role != "assistant") {
    r.Fail(MissingField(r.Param("content")));
  }
  r.String("name", &out->name);
  std::string reasoning;
  if (r.String("reasoning_content", &reasoning)) {
    if (out->role != "assistant") {
      r.Fail(InvalidRequest(r.Param("reasoning_content"),
                            "Only assistant messages can have 'reasoning_content'."));
    }
    out->reasoning_content = std::move(reasoning);
  }
  ReadToolCalls(r, out);
  if (r.String("tool_call_id", &out->tool_call_id) && out->role != "tool") {
    r.Fail(
        InvalidRequest(r.Param("tool_call_id"), "Only tool messages can have a 'tool_call_id'."));
  }
  r.RejectUnread({});
  if (!r.ok()) f.Fail(r.error());
}

void ReadMessages(FieldReader& f, std::vector<ChatMessage>* messages) {
  const json* v = f.ok() ? f.Find("messages") : nullptr;
  if (v == nullptr) return f.Fail(MissingField("messages"));
  if (!v->is_array()) return f.Fail(WrongType("messages", "an array of messages", *v));
  if (v->empty()) {
    return f.Fail(InvalidRequest("messages",
                                 "Invalid 'messages': empty array. Expected an array with minimum "
                                 "length 1, but got an empty array instead."));
  }
  messages->resize(v->size());
  for (size_t i = 0; i < v->size() && f.ok(); ++i) ReadMessage(f, (*v)[i], i, &(*messages)[i]);
}

// One {"type": "function", "function": {name, description?, parameters?, strict?}}.
void ReadTool(FieldReader& f, const json& t, const std::string& param, std::string* name) {
  if (!t.is_object()) return f.Fail(WrongType(param, "an object", t));
  FieldReader r(t, param + ".");
  std::string type;
  if (!r.String("type", &type) && r.ok()) r.Fail(MissingField(r.Param("type")));
  if (r.ok() && type != "function") r.Fail(BadValue(r.Param("type"), "\"function\"", type));
  const json* fn = r.ok() ? r.Find("function") : nullptr;
  if (fn == nullptr && r.ok()) r.Fail(MissingField(r.Param("function")));
  if (fn != nullptr && !fn->is_object()) r.Fail(WrongType(r.Param("function"), "an object", *fn));
  if (r.ok()) {
    FieldReader fr(*fn, r.Param("function."));
    ReadFunctionName(fr, name);
    std::string description;
    bool strict = false;
    fr.String("description", &description);
    fr.Bool("strict", &strict);
    const json* params = fr.ok() ? fr.Find("parameters") : nullptr;
    if (params != nullptr && !params->is_object()) {
      fr.Fail(WrongType(fr.Param("parameters"), "a JSON schema object", *params));
    }
    fr.RejectUnread({});
    if (!fr.ok()) r.Fail(fr.error());
  }
  r.RejectUnread({});
  if (!r.ok()) f.Fail(r.error());
}

void ReadTools(FieldReader& f, ChatCompletionRequest* r, std::set<std::string>* names) {
  const json* tools = f.ok() ? f.Find("tools") : nullptr;
  if (tools == nullptr) return;
  if (!tools->is_array()) return f.Fail(WrongType("tools", "an array of tools", *tools));
  for (size_t i = 0; i < tools->size() && f.ok(); ++i) {
    std::string name;
    const std::string param = absl::StrCat("tools[", i, "]");
    ReadTool(f, (*tools)[i], param, &name);
    if (f.ok() && !names->insert(name).second) {
      f.Fail(InvalidRequest(param + ".function.name",
                            absl::StrCat("Two tools are named '", name, "'; names must differ.")));
    }
  }
  // [] is "no tools", as null is.
  if (f.ok() && !tools->empty()) r->tools = nlohmann::ordered_json::parse(tools->dump());
}

void ReadToolChoice(FieldReader& f, const std::set<std::string>& names, ChatCompletionRequest* r) {
  const json* c = f.ok() ? f.Find("tool_choice") : nullptr;
  f.Bool("parallel_tool_calls", &r->parallel_tool_calls);
  if (c == nullptr) return;
  if (c->is_string()) {
    const std::string& s = c->get_ref<const std::string&>();
    // Without tools "none" and "auto" change nothing, so they pass (clients send them always).
    if (s == "none") return void(r->tool_choice = ToolChoice::kNone);
    if (s == "auto") return void(r->tool_choice = ToolChoice::kAuto);
    if (s == "required") {
      r->tool_choice = ToolChoice::kRequired;
    } else {
      return f.Fail(BadValue("tool_choice", "\"none\", \"auto\", \"required\" or a function", s));
    }
  } else if (c->is_object()) {
    FieldReader cr(*c, "tool_choice.");
    std::string type;
    if (!cr.String("type", &type) && cr.ok()) cr.Fail(MissingField(cr.Param("type")));
    if (cr.ok() && type != "function") cr.Fail(BadValue(cr.Param("type"), "\"function\"", type));
    const json* fn = cr.ok() ? cr.Find("function") : nullptr;
    if (fn == nullptr && cr.ok()) cr.Fail(MissingField(cr.Param("function")));
    if (fn != nullptr && !fn->is_object()) {
      cr.Fail(WrongType(cr.Param("function"), "an object", *fn));
    }
    if (cr.ok()) {
      FieldReader fr(*fn, "tool_choice.function.");
      ReadFunctionName(fr, &r->tool_choice_function);
      fr.RejectUnread({});
      if (!fr.ok()) cr.Fail(fr.error());
    }
    cr.RejectUnread({});
    if (!cr.ok()) return f.Fail(cr.error());
    r->tool_choice = ToolChoice::kFunction;
  } else {
    return f.Fail(WrongType("tool_choice", "a string or an object", *c));
  }
  if (r->tools.is_null()) {
    return f.Fail(InvalidRequest(
        "tool_choice", "'tool_choice' needs 'tools': send the tools the model may call."));
  }
  if (r->tool_choice == ToolChoice::kFunction && !names.contains(r->tool_choice_function)) {
    return f.Fail(InvalidRequest(
        "tool_choice.function.name",
        absl::StrCat("No tool named '", r->tool_choice_function, "' is in 'tools'.")));
  }
  // "required" and a named function are honoured by constrained decoding (forced_tool_call.h);
  // what they cannot be combined with is refused once the model is known (ChatGeneration).
}

void ReadTemplateKwargs(FieldReader& f, ChatCompletionRequest* r) {
  const json* kwargs = f.ok() ? f.Find("chat_template_kwargs") : nullptr;
  if (kwargs == nullptr) return;
  if (!kwargs->is_object()) return f.Fail(WrongType("chat_template_kwargs", "an object", *kwargs));
  FieldReader k(*kwargs, "chat_template_kwargs.");
  bool thinking = true;
  if (k.Bool("enable_thinking", &thinking)) r->enable_thinking = thinking;
  if (!k.ok()) return f.Fail(k.error());
  nlohmann::ordered_json rest = nlohmann::ordered_json::object();
  for (const auto& [name, value] : kwargs->items()) {
    for (std::string_view taken : kTemplateVariables) {
      if (name == taken) {
        return f.Fail(InvalidRequest(
            k.Param(name), absl::StrCat("'", name,
                                        "' is set by the server; it cannot be a chat template "
                                        "kwarg.")));
      }
    }
    if (name != "enable_thinking") rest[name] = nlohmann::ordered_json::parse(value.dump());
  }
  if (!rest.empty()) r->template_kwargs = std::move(rest);
}

}  // namespace

void ReadChatFields(FieldReader& f, ChatCompletionRequest* r) {
  ReadMessages(f, &r->messages);
  std::set<std::string> names;
  ReadTools(f, r, &names);
  ReadToolChoice(f, names, r);
  ReadTemplateKwargs(f, r);
}

}  // namespace dq::router
