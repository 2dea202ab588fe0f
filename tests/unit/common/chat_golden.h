// The golden chat files (tests/golden/chat/, rendered by HF transformers) as the chat template
// tests read them.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/chat_template.h"
#include "nlohmann/json.hpp"

namespace dq::chat_golden {

inline std::string Dir() { return std::string(DQ_SOURCE_DIR) + "/tests/golden/chat/"; }

inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// OpenAI-shaped messages (role, content or null, tool_calls, tool_call_id) as ChatMessages.
inline std::vector<ChatMessage> Messages(const nlohmann::json& j) {
  std::vector<ChatMessage> out;
  for (const auto& m : j) {
    ChatMessage msg;
    msg.role = m.at("role");
    if (m.contains("content") && m["content"].is_string()) msg.content = m["content"];
    if (m.contains("tool_call_id")) msg.tool_call_id = m["tool_call_id"];
    for (const auto& c : m.value("tool_calls", nlohmann::json::array())) {
      msg.tool_calls.push_back(
          {c.at("id"), c.at("function").at("name"), c.at("function").at("arguments")});
    }
    out.push_back(std::move(msg));
  }
  return out;
}

// The golden template files: "smollm2", "chatml", "qwen3"
// (tests/golden/chat/<name>_template.jinja).
inline ChatTemplate Template(const std::string& name, ChatSpecialTokens tokens = {}) {
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::Parse(ReadFile(Dir() + name + "_template.jinja"), std::move(tokens));
  EXPECT_TRUE(t.ok()) << name << ": " << t.status();
  if (!t.ok()) return *ChatTemplate::Parse("");
  return *std::move(t);
}

}  // namespace dq::chat_golden
