#include "router/forced_tool_call.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace dq::router {
namespace {

using ojson = nlohmann::ordered_json;

// Keywords whose values are data, not schemas: a "$ref" key inside them is no reference.
bool HoldsData(std::string_view key) {
  return key == "const" || key == "enum" || key == "default" || key == "examples";
}

// Every "$ref": "#..." in `schema` rebased under `base` (a JSON pointer such as
// "#/properties/arguments"), so the tool's references keep pointing into its own parameters.
void RebaseRefs(ojson& schema, const std::string& base) {
  if (schema.is_array()) {
    for (ojson& item : schema) RebaseRefs(item, base);
    return;
  }
  if (!schema.is_object()) return;
  for (auto it = schema.begin(); it != schema.end(); ++it) {
    if (it.key() == "$ref" && it->is_string()) {
      const std::string& ref = it->get_ref<const std::string&>();
      if (ref.starts_with("#")) *it = base + ref.substr(1);
    } else if (!HoldsData(it.key())) {
      RebaseRefs(*it, base);
    }
  }
}

// {"type": "object", "properties": {"name": {"const": name}, "arguments": parameters}, ...}
// for one tool, which sits at `base` in the whole schema.
ojson CallSchema(const ojson& function, const std::string& base) {
  ojson arguments = ojson{{"type", "object"}};
  if (function.contains("parameters")) {
    arguments = function.at("parameters");
    RebaseRefs(arguments, base + "/properties/arguments");
  }
  ojson properties = ojson::object();
  properties["name"] = ojson{{"const", function.at("name")}};
  properties["arguments"] = std::move(arguments);
  ojson call = ojson::object();
  call["type"] = "object";
  call["properties"] = std::move(properties);
  call["required"] = ojson::array({"name", "arguments"});
  call["additionalProperties"] = false;
  return call;
}

}  // namespace

bool ForcesToolCall(const ChatCompletionRequest& request) {
  return !request.tools.is_null() && (request.tool_choice == ToolChoice::kRequired ||
                                      request.tool_choice == ToolChoice::kFunction);
}

std::string ForcedToolCallSchema(const ChatCompletionRequest& request) {
  std::vector<const ojson*> functions;
  for (const ojson& tool : request.tools) {
    const ojson& fn = tool.at("function");
    if (request.tool_choice == ToolChoice::kFunction &&
        fn.at("name").get<std::string>() != request.tool_choice_function) {
      continue;
    }
    functions.push_back(&fn);
  }
  if (functions.size() == 1) return CallSchema(*functions[0], "#").dump();
  ojson any = ojson::array();
  for (size_t i = 0; i < functions.size(); ++i) {
    any.push_back(CallSchema(*functions[i], "#/anyOf/" + std::to_string(i)));
  }
  return ojson{{"anyOf", std::move(any)}}.dump();
}

}  // namespace dq::router
