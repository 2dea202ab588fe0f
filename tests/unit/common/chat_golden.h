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

inline std::vector<ChatMessage> Messages(const nlohmann::json& j) {
  std::vector<ChatMessage> out;
  for (const auto& m : j) out.push_back({m.at("role"), m.at("content")});
  return out;
}

// The template a golden file's name stands for ("smollm2", "chatml", "qwen3").
inline ChatTemplate::Kind KindOf(const std::string& name) {
  if (name == "smollm2") return ChatTemplate::Kind::kChatMLSmolLM2;
  if (name == "chatml") return ChatTemplate::Kind::kChatML;
  return ChatTemplate::Kind::kQwen3;
}

}  // namespace dq::chat_golden
