// Checks a Tokenizer against golden data written by
// tests/golden/tokenizer/make_tokenizer_golden.py (HF `tokenizers` outputs). Header-only so the
// common and engine test binaries can both use it.
#pragma once

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dq::testing {

inline std::string SourceDir() {
  const char* env = std::getenv("DQ_SOURCE_DIR");
  return env != nullptr ? env : DQ_SOURCE_DIR;
}

inline std::string GoldenDir(const std::string& name) {
  return SourceDir() + "/tests/golden/tokenizer/" + name;
}

inline nlohmann::json ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return nlohmann::json::parse(buffer.str());
}

inline std::string Escaped(const std::string& s) {
  std::string out = nlohmann::json(s).dump(-1, ' ', true);
  return out.size() > 300 ? out.substr(0, 300) + "..." : out;
}

inline std::string IdsToString(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size() && i < 64; ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ids[i]);
  }
  return out + (ids.size() > 64 ? ",...]" : "]");
}

struct GoldenCounts {
  int strings = 0;
  int decodes = 0;
};

// Checks every golden entry; reports each mismatch (up to a limit) with the text.
inline GoldenCounts CheckGolden(const Tokenizer& tok, const std::string& golden_path) {
  const nlohmann::json golden = ReadJsonFile(golden_path);
  GoldenCounts counts;
  int failures = 0;
  for (const auto& e : golden.at("encode")) {
    const std::string text = e.at("text").get<std::string>();
    const auto ids = e.at("ids").get<std::vector<int32_t>>();
    const auto ids_no_special = e.at("ids_no_special").get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok.Encode(text);
    const std::vector<int32_t> got_plain = tok.Encode(text, /*parse_special=*/false);
    const std::string decoded = tok.Decode(ids);
    const std::string decoded_skip = tok.Decode(ids, /*skip_special=*/true);
    IncrementalDetokenizer detok(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += detok.Next(id);
    streamed += detok.Flush();
    const bool ok = got == ids && got_plain == ids_no_special &&
                    decoded == e.at("decoded").get<std::string>() &&
                    decoded_skip == e.at("decoded_skip_special").get<std::string>() &&
                    streamed == decoded;
    if (!ok && ++failures <= 20) {
      ADD_FAILURE() << golden_path << ": text " << Escaped(text) << "\n  ids      want "
                    << IdsToString(ids) << "\n           got  " << IdsToString(got)
                    << "\n  no-special want " << IdsToString(ids_no_special) << "\n  got "
                    << IdsToString(got_plain) << "\n  decoded want "
                    << Escaped(e.at("decoded").get<std::string>()) << "\n          got  "
                    << Escaped(decoded) << "\n  skip-special got " << Escaped(decoded_skip)
                    << "\n  streamed " << Escaped(streamed);
    }
    ++counts.strings;
  }
  for (const auto& e : golden.at("decode")) {
    const auto ids = e.at("ids").get<std::vector<int32_t>>();
    const std::string want = e.at("decoded").get<std::string>();
    const std::string got = tok.Decode(ids);
    if (got != want && ++failures <= 20) {
      ADD_FAILURE() << golden_path << ": decode " << IdsToString(ids) << " want " << Escaped(want)
                    << " got " << Escaped(got);
    }
    ++counts.decodes;
  }
  EXPECT_EQ(failures, 0) << golden_path;
  return counts;
}

}  // namespace dq::testing
