// The Qwen-style test tokenizer (tests/golden/tokenizer/qwen-style), loaded once per test binary:
// the real 49k vocabulary the grammar and sampler tests mask over.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "common/tokenizer/tokenizer.h"

namespace dq::testing {

inline const Tokenizer& QwenTokenizer() {
  static const auto* tok = [] {
    auto t = Tokenizer::FromHfJson(std::string(DQ_SOURCE_DIR) +
                                   "/tests/golden/tokenizer/qwen-style/tokenizer.json");
    EXPECT_TRUE(t.ok()) << t.status();
    return new Tokenizer(t.ok() ? *t : Tokenizer());
  }();
  return *tok;
}

}  // namespace dq::testing
