// LoadTokenizerFromGguf / LoadTokenizerFromDir: the real SmolLM2 GGUF against the HF golden
// data (skipped when models/ lacks it), error messages, and BOS/EOS from a checkpoint dir.
#include "engine/model/tokenizer_loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/unit/common/tokenizer_golden_util.h"

namespace dq {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string SmolLM2Gguf() {
  const char* env = std::getenv("DQ_SMOLLM2_GGUF");
  if (env != nullptr && *env != '\0') return env;
  return testing::SourceDir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/dq_tokloader_", ::getpid(), "_", name);
}

// A minimal GGUF v3 file with string / string-array metadata and no tensors.
class GgufWriter {
 public:
  void String(const std::string& key, const std::string& value) {
    Key(key, 8);
    Str(value);
    ++count_;
  }
  void StringArray(const std::string& key, const std::vector<std::string>& values) {
    Key(key, 9);
    Pod<uint32_t>(8);
    Pod<uint64_t>(values.size());
    for (const auto& v : values) Str(v);
    ++count_;
  }
  std::string Write(const std::string& name) {
    const std::string path = TempPath(name);
    std::ofstream out(path, std::ios::binary);
    out.write("GGUF", 4);
    const uint32_t version = 3;
    const uint64_t tensors = 0;
    out.write(reinterpret_cast<const char*>(&version), 4);
    out.write(reinterpret_cast<const char*>(&tensors), 8);
    out.write(reinterpret_cast<const char*>(&count_), 8);
    out.write(body_.data(), static_cast<std::streamsize>(body_.size()));
    return path;
  }

 private:
  template <typename T>
  void Pod(T v) {
    body_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void Str(const std::string& s) {
    Pod<uint64_t>(s.size());
    body_ += s;
  }
  void Key(const std::string& key, uint32_t type) {
    Str(key);
    Pod<uint32_t>(type);
  }
  std::string body_;
  uint64_t count_ = 0;
};

absl::Status LoadFromWriter(GgufWriter& w, const std::string& name) {
  auto gguf = GgufFile::Open(w.Write(name));
  if (!gguf.ok()) return gguf.status();
  return LoadTokenizerFromGguf(**gguf).status();
}

GgufWriter TinyGpt2Gguf(const std::string& model, const std::string& pre) {
  GgufWriter w;
  w.String("tokenizer.ggml.model", model);
  if (!pre.empty()) w.String("tokenizer.ggml.pre", pre);
  w.StringArray("tokenizer.ggml.tokens", {"a", "b", "ab"});
  w.StringArray("tokenizer.ggml.merges", {"a b"});
  return w;
}

TEST(TokenizerLoaderTest, SmolLM2GgufMatchesHfGolden) {
  const std::string path = SmolLM2Gguf();
  if (!fs::exists(path)) GTEST_SKIP() << path << " absent (scripts/setup.sh fetches it)";
  auto gguf = GgufFile::Open(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto tok = LoadTokenizerFromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->pre_tokenizer(), PreTokenizer::kSmolLM);
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->IsSpecial(0));
  EXPECT_FALSE(tok->IsSpecial(17));
  const auto counts = testing::CheckGolden(*tok, testing::GoldenDir("smollm2") + "/golden.json");
  EXPECT_GE(counts.strings, 200);
}

// llama.cpp's models/ggml-vocab-*.gguf with their .inp/.out expectations (HF-generated), for
// local checks: DQ_TOKENIZER_EXTRA_GGUF is a colon-separated list of such GGUF paths.
TEST(TokenizerLoaderTest, ExtraVocabGgufs) {
  const char* env = std::getenv("DQ_TOKENIZER_EXTRA_GGUF");
  if (env == nullptr || *env == '\0') GTEST_SKIP() << "DQ_TOKENIZER_EXTRA_GGUF not set";
  std::stringstream paths(env);
  std::string path;
  while (std::getline(paths, path, ':')) {
    auto gguf = GgufFile::Open(path);
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    auto tok = LoadTokenizerFromGguf(**gguf);
    ASSERT_TRUE(tok.ok()) << path << ": " << tok.status();
    std::ifstream inp(path + ".inp"), out(path + ".out");
    if (!inp || !out) continue;
    std::stringstream all;
    all << inp.rdbuf();
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::string text = all.str(), line;
    int checked = 0;
    for (size_t pos = 0; pos < text.size() && std::getline(out, line); ++checked) {
      size_t end = text.find(sep, pos);
      if (end == std::string::npos) end = text.size();
      std::vector<int32_t> want;
      std::stringstream ids(line);
      for (int32_t id; ids >> id;) want.push_back(id);
      EXPECT_EQ(tok->Encode(text.substr(pos, end - pos), false), want)
          << path << ": " << testing::Escaped(text.substr(pos, end - pos));
      pos = end + sep.size();
    }
    std::cout << path << ": " << checked << " llama.cpp cases\n";
  }
}

TEST(TokenizerLoaderTest, RejectsUnsupportedGguf) {
  auto spm = TinyGpt2Gguf("llama", "default");
  EXPECT_THAT(LoadFromWriter(spm, "spm.gguf").message(), HasSubstr("only \"gpt2\""));
  auto unknown = TinyGpt2Gguf("gpt2", "mystery");
  EXPECT_THAT(LoadFromWriter(unknown, "pre.gguf").message(),
              HasSubstr("tokenizer.ggml.pre \"mystery\" is not supported"));
  auto missing = TinyGpt2Gguf("gpt2", "");
  EXPECT_THAT(LoadFromWriter(missing, "nopre.gguf").message(), HasSubstr("no tokenizer.ggml.pre"));
  GgufWriter bad_merge;
  bad_merge.String("tokenizer.ggml.model", "gpt2");
  bad_merge.String("tokenizer.ggml.pre", "qwen2");
  bad_merge.StringArray("tokenizer.ggml.tokens", {"a", "b"});
  bad_merge.StringArray("tokenizer.ggml.merges", {"a b"});
  EXPECT_THAT(LoadFromWriter(bad_merge, "merge.gguf").message(),
              HasSubstr("not in the vocabulary"));
}

TEST(TokenizerLoaderTest, TinyGgufLoads) {
  auto w = TinyGpt2Gguf("gpt2", "qwen2");
  auto gguf = GgufFile::Open(w.Write("tiny.gguf"));
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto tok = LoadTokenizerFromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->pre_tokenizer(), PreTokenizer::kQwen2);
  EXPECT_EQ(tok->normalizer(), Normalizer::kNfc);
  EXPECT_EQ(tok->Encode("abba"), (std::vector<int32_t>{2, 1, 0}));
  EXPECT_FALSE(tok->bos_id().has_value());
}

TEST(TokenizerLoaderTest, DirReadsBosEosFromConfigs) {
  const fs::path dir = TempPath("ckpt");
  fs::create_directories(dir);
  fs::copy_file(testing::GoldenDir("qwen-style") + "/tokenizer.json", dir / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": null, "eos_token": {"content": "<|im_end|>"}})";
  std::ofstream(dir / "config.json") << R"({"bos_token_id": 0, "eos_token_id": [1, 2]})";
  auto tok = LoadTokenizerFromDir(dir.string());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->bos_id(), 0);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->Decode(tok->Encode("<|im_start|>hi<|im_end|>")), "<|im_start|>hi<|im_end|>");

  auto missing = LoadTokenizerFromDir((dir / "nope").string());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("no tokenizer.json"));
}

}  // namespace
}  // namespace dq
