// A ServedModel for router tests: the qwen-style golden tokenizer, the Qwen3 chat template and
// a small context, without loading any weights.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "router/served_model.h"

namespace dq::router {

inline ServedModel TestModel(int max_context = 64) {
  ServedModel m;
  m.name = "tiny";
  m.path = "/models/tiny";
  auto tok = Tokenizer::FromHfJson(std::string(DQ_SOURCE_DIR) +
                                   "/tests/golden/tokenizer/qwen-style/tokenizer.json");
  EXPECT_TRUE(tok.ok()) << tok.status();
  if (tok.ok()) m.tokenizer = *tok;
  std::ifstream f(std::string(DQ_SOURCE_DIR) + "/tests/golden/chat/qwen3_template.jinja");
  const std::string source((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto tmpl = ChatTemplate::Parse(source, {"", "<|im_end|>"});
  EXPECT_TRUE(tmpl.ok()) << tmpl.status();
  if (tmpl.ok()) m.chat_template = *tmpl;
  m.max_context = max_context;
  m.vocab_size = m.tokenizer.vocab_size();
  return m;
}

}  // namespace dq::router
