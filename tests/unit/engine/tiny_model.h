// The tiny random Qwen3 checkpoint that CTest's fixture writes with `dq-tool make-tiny`.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "engine/model/model_loader.h"

namespace dq::testing {

inline std::string TinyQwen3Path() {
  const char* env = std::getenv("DQ_TINY_QWEN3");
  return env ? env : std::string(DQ_BINARY_DIR) + "/tiny-qwen3";
}

// The tiny random Gemma 3 of CTest's fixture.make_tiny_gemma3.
inline std::string TinyGemma3Path() { return std::string(DQ_BINARY_DIR) + "/tiny-gemma3"; }
// The tiny random Qwen3.5 of CTest's fixture.make_tiny_qwen3_5.
inline std::string TinyQwen3_5Path() { return std::string(DQ_BINARY_DIR) + "/tiny-qwen3_5"; }

inline std::string SmolLM2Path() {
  return std::string(DQ_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// Loads the tiny model; fails the test with a hint when the fixture did not run.
inline std::unique_ptr<Model> LoadTinyQwen3() {
  auto m = LoadModel(TinyQwen3Path());
  EXPECT_TRUE(m.ok()) << m.status() << " (run the tests through ctest, which makes it first)";
  return m.ok() ? std::move(*m) : nullptr;
}

}  // namespace dq::testing
