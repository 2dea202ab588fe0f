#include "engine/checkpoint/gguf_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/mapped_file.h"
#include "engine/quant/ggml_blocks.h"

namespace dq {
namespace {

using ::testing::HasSubstr;

std::string Fixture(const std::string& name) {
  return std::string(DQ_SOURCE_DIR) + "/tests/fixtures/checkpoints/" + name;
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// A per-process path, since ctest may run test cases of this binary in parallel.
std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/dq_gguf_", ::getpid(), "_", name);
}

std::string WriteTemp(const std::string& name, const uint8_t* data, size_t n) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data), n);
  return path;
}

absl::Status OpenBytes(const std::vector<uint8_t>& bytes, size_t n = SIZE_MAX) {
  const std::string path = WriteTemp("mut.gguf", bytes.data(), std::min(n, bytes.size()));
  return GgufFile::Open(path).status();
}

// Byte offset of the first occurrence of `s` (a GGUF string payload) in `bytes`.
size_t Find(const std::vector<uint8_t>& bytes, const std::string& s) {
  auto it = std::search(bytes.begin(), bytes.end(), s.begin(), s.end());
  EXPECT_NE(it, bytes.end()) << s;
  return static_cast<size_t>(it - bytes.begin());
}

template <typename T>
void Put(std::vector<uint8_t>* bytes, size_t pos, T v) {
  std::memcpy(bytes->data() + pos, &v, sizeof v);
}

TEST(MappedFile, MapsFileAndReportsErrors) {
  const std::string ok = WriteTemp("mapped.bin", reinterpret_cast<const uint8_t*>("abc"), 3);
  auto f = MappedFile::Open(ok);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->size(), 3u);
  EXPECT_EQ(std::memcmp((*f)->data(), "abc", 3), 0);
  EXPECT_EQ((*f)->path(), ok);
  EXPECT_EQ(MappedFile::Open("/nonexistent/dq.bin").status().code(), absl::StatusCode::kNotFound);
  auto dir = MappedFile::Open(::testing::TempDir());
  EXPECT_THAT(dir.status().message(), HasSubstr("is a directory"));
  const std::string empty = WriteTemp("empty.bin", nullptr, 0);
  EXPECT_THAT(MappedFile::Open(empty).status().message(), HasSubstr("is empty"));
}

TEST(GgufFile, ReadsEveryMetadataType) {
  auto f = GgufFile::Open(Fixture("tiny_v3.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(*g.GetString("general.architecture"), "tiny");
  EXPECT_EQ(*g.GetInt("test.u8"), 200);
  EXPECT_EQ(*g.GetInt("test.i8"), -100);
  EXPECT_EQ(*g.GetInt("test.u16"), 60000);
  EXPECT_EQ(*g.GetInt("test.i16"), -30000);
  EXPECT_EQ(*g.GetInt("test.u32"), 4000000000);
  EXPECT_EQ(*g.GetInt("test.i32"), -2000000000);
  EXPECT_EQ(*g.GetInt("test.i64"), -(int64_t{1} << 40));
  EXPECT_EQ(std::get<uint64_t>(g.metadata().at("test.u64")), (uint64_t{1} << 63) + 5);
  EXPECT_EQ(g.GetInt("test.u64").status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(*g.GetFloat("test.f32"), 1.5);
  EXPECT_EQ(*g.GetFloat("test.f64"), 3.141592653589793);
  EXPECT_EQ(*g.GetFloat("test.u8"), 200.0);
  EXPECT_TRUE(*g.GetBool("test.bool"));
  EXPECT_EQ(*g.GetString("test.string"), "h\xc3\xa9llo \xe2\x9c\x93");
  EXPECT_EQ(*g.GetIntArray("test.arr.u8"), (std::vector<int64_t>{1, 2, 255}));
  EXPECT_EQ(*g.GetIntArray("test.arr.i16"), (std::vector<int64_t>{-5, 0, 5}));
  EXPECT_EQ(*g.GetIntArray("test.arr.i32"), (std::vector<int64_t>{-1, 0, 7}));
  EXPECT_EQ(*g.GetIntArray("test.arr.u64"), (std::vector<int64_t>{1, int64_t{1} << 40}));
  EXPECT_EQ(*g.GetIntArray("test.arr.bool"), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(*g.GetFloatArray("test.arr.f32"), (std::vector<double>{0.5, -2.25}));
  EXPECT_EQ(*g.GetFloatArray("test.arr.f64"), (std::vector<double>{0.1, 1e300}));
  EXPECT_EQ(**g.GetStringArray("test.arr.string"), (std::vector<std::string>{"a", "", "ccc"}));
}

TEST(GgufFile, GetterErrorsNameTheKey) {
  auto f = GgufFile::Open(Fixture("tiny_v3.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  auto missing = (*f)->GetInt("llama.block_count");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("llama.block_count"));
  auto wrong = (*f)->GetString("test.u8");
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(), HasSubstr("test.u8"));
  EXPECT_FALSE((*f)->GetInt("test.string").ok());
  EXPECT_FALSE((*f)->GetBool("test.u8").ok());
  EXPECT_FALSE((*f)->GetStringArray("test.arr.u8").ok());
  EXPECT_FALSE((*f)->GetFloatArray("test.arr.string").ok());
  EXPECT_FALSE((*f)->Has("nope"));
}

TEST(GgufFile, TensorTableShapesAreReversed) {
  auto f = GgufFile::Open(Fixture("tiny_v3.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  struct Want {
    const char* name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  const std::vector<Want> want = {
      {"f32.weight", DType::kF32, {3, 8}},      {"f16.weight", DType::kF16, {2, 3, 4}},
      {"bf16.weight", DType::kBF16, {2, 16}},   {"q4_0.weight", DType::kQ4_0, {4, 64}},
      {"q4_1.weight", DType::kQ4_1, {4, 96}},   {"q8_0.weight", DType::kQ8_0, {3, 64}},
      {"q4_1.4d", DType::kQ4_1, {2, 1, 2, 32}},
  };
  const auto& ts = (*f)->tensors();
  ASSERT_EQ(ts.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(ts[i].name, want[i].name);
    EXPECT_EQ(ts[i].dtype, want[i].dtype) << ts[i].name;
    EXPECT_EQ(ts[i].shape, want[i].shape) << ts[i].name;
    EXPECT_EQ(ts[i].nbytes, DTypeRowBytes(ts[i].dtype, ts[i].cols()) * ts[i].rows());
    EXPECT_EQ((*f)->Find(want[i].name), &ts[i]);
  }
  EXPECT_EQ((*f)->Find("missing"), nullptr);
  EXPECT_EQ((*f)->format(), "gguf");
}

// Our dequantization must be bit-identical to gguf-py's (the fixture generator stored it).
TEST(GgufFile, DequantizeMatchesGgufPyBitExact) {
  auto f = GgufFile::Open(Fixture("tiny_v3.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  const std::vector<uint8_t> raw = ReadBytes(Fixture("tiny_v3.dequant.f32"));
  std::vector<float> expected(raw.size() / 4);
  std::memcpy(expected.data(), raw.data(), raw.size());
  size_t pos = 0;
  for (const TensorView& t : (*f)->tensors()) {
    ASSERT_LE(pos + t.numel(), expected.size());
    std::vector<float> out(t.numel());
    const int64_t row_bytes = DTypeRowBytes(t.dtype, t.cols());
    for (int64_t r = 0; r < t.rows(); ++r) {
      DequantizeRow(t.dtype, t.data + r * row_bytes, out.data() + r * t.cols(), t.cols());
    }
    for (int64_t i = 0; i < t.numel(); ++i) {
      ASSERT_EQ(std::memcmp(&out[i], &expected[pos + i], 4), 0)
          << t.name << "[" << i << "]: " << out[i] << " vs gguf-py " << expected[pos + i];
    }
    pos += t.numel();
  }
  EXPECT_EQ(pos, expected.size());
}

TEST(GgufFile, HonorsCustomAlignment) {
  auto f = GgufFile::Open(Fixture("align64.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  const auto& ts = (*f)->tensors();
  ASSERT_EQ(ts.size(), 2u);
  EXPECT_EQ(*(*f)->GetInt("general.alignment"), 64);
  EXPECT_EQ(ts[0].nbytes, 68);
  EXPECT_EQ(ts[1].data - ts[0].data, 128);  // 68 bytes padded up to the 64-byte alignment
  // gguf-py's reader places the first tensor at byte 192 of this file.
  const std::vector<uint8_t> bytes = ReadBytes(Fixture("align64.gguf"));
  EXPECT_EQ(std::memcmp(ts[0].data, bytes.data() + 192, 68), 0);
}

TEST(GgufFile, AcceptsV2RejectsOtherVersions) {
  std::vector<uint8_t> bytes = ReadBytes(Fixture("tiny_v3.gguf"));
  Put<uint32_t>(&bytes, 4, 2);
  EXPECT_TRUE(OpenBytes(bytes).ok());
  for (uint32_t v : {0u, 1u, 4u, 0xffffffffu}) {
    Put<uint32_t>(&bytes, 4, v);
    absl::Status s = OpenBytes(bytes);
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("unsupported GGUF version ", v))) << s;
  }
}

TEST(GgufFile, RejectsBadMagicAndMissingFile) {
  std::vector<uint8_t> bytes = ReadBytes(Fixture("tiny_v3.gguf"));
  bytes[0] = 'X';
  EXPECT_THAT(OpenBytes(bytes).message(), HasSubstr("bad magic"));
  EXPECT_EQ(GgufFile::Open("/nonexistent/model.gguf").status().code(), absl::StatusCode::kNotFound);
}

// Every prefix must fail cleanly (never crash) until only trailing padding is missing.
TEST(GgufFile, TruncatedAtEveryLengthFailsCleanly) {
  for (const char* name : {"tiny_v3.gguf", "align64.gguf"}) {
    const std::vector<uint8_t> bytes = ReadBytes(Fixture(name));
    const std::string path = TempPath("trunc.gguf");
    // Every length through the header and tensor table; past that only tensor data is cut.
    for (size_t n = 1; n < bytes.size(); n += n < 1200 ? 1 : 7) {
      std::ofstream(path, std::ios::binary | std::ios::trunc)
          .write(reinterpret_cast<const char*>(bytes.data()), n);
      auto f = GgufFile::Open(path);
      if (n + 64 <= bytes.size()) {
        EXPECT_FALSE(f.ok()) << name << " prefix " << n;
      }
    }
  }
}

TEST(GgufFile, CorruptCountsAndLengthsFail) {
  const std::vector<uint8_t> orig = ReadBytes(Fixture("tiny_v3.gguf"));
  auto expect_error = [&](size_t pos, uint64_t v, int width, const char* needle) {
    std::vector<uint8_t> b = orig;
    if (width == 8) Put<uint64_t>(&b, pos, v);
    if (width == 4) Put<uint32_t>(&b, pos, static_cast<uint32_t>(v));
    if (width == 1) Put<uint8_t>(&b, pos, static_cast<uint8_t>(v));
    absl::Status s = OpenBytes(b);
    EXPECT_FALSE(s.ok()) << "pos " << pos;
    EXPECT_THAT(s.message(), HasSubstr(needle)) << s;
  };
  expect_error(8, uint64_t{1} << 60, 8, "cannot fit");      // tensor count
  expect_error(16, uint64_t{1} << 60, 8, "cannot fit");     // metadata count
  expect_error(16, 1000, 8, "");                            // more keys than present
  expect_error(24, uint64_t{1} << 62, 8, "string length");  // first key length
  const size_t arr = Find(orig, "test.arr.u8") + 11;        // value type, elem type, count
  expect_error(arr + 8, uint64_t{1} << 61, 8, "array length");
  expect_error(arr + 4, 9, 4, "array of arrays");
  expect_error(arr, 13, 4, "unknown metadata value type 13");
  expect_error(Find(orig, "test.bool") + 9 + 4, 7, 1, "");  // bool value byte
}

TEST(GgufFile, CorruptTensorInfoFails) {
  const std::vector<uint8_t> orig = ReadBytes(Fixture("tiny_v3.gguf"));
  // Tensor info: name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset.
  const size_t f32 = Find(orig, "f32.weight") + 10;  // n_dims of f32.weight (2 dims)
  const size_t q40 = Find(orig, "q4_0.weight") + 11;
  auto check = [&](size_t pos, uint64_t v, int width, const char* needle) {
    std::vector<uint8_t> b = orig;
    if (width == 8) Put<uint64_t>(&b, pos, v);
    if (width == 4) Put<uint32_t>(&b, pos, static_cast<uint32_t>(v));
    absl::Status s = OpenBytes(b);
    EXPECT_THAT(s.message(), HasSubstr(needle)) << s;
  };
  check(f32, 5, 4, "has 5 dimensions; at most 4");
  check(f32 + 4 + 16, 34, 4, "unsupported tensor type 34 (TQ1_0) for tensor 'f32.weight'");
  check(f32 + 4 + 16, 1000, 4, "unsupported tensor type 1000");
  check(f32 + 4 + 16 + 4, uint64_t{1} << 40, 8, "runs past the end of the file");
  check(f32 + 4 + 16 + 4, 4, 8, "not a multiple of the alignment");
  check(f32 + 4, uint64_t{1} << 63, 8, "negative or huge dimension");
  check(f32 + 4, uint64_t{1} << 40, 8, "runs past the end");
  check(f32 + 4 + 8, uint64_t{1} << 40, 8, "");
  check(q40 + 4, 48, 8, "not a multiple of the q4_0 block size 32");
  check(q40 + 4 + 8, uint64_t{1} << 58, 8, "impossibly large");
}

TEST(GgufFile, RejectsBadAlignment) {
  std::vector<uint8_t> b = ReadBytes(Fixture("align64.gguf"));
  const size_t value = Find(b, "general.alignment") + 17 + 4;  // after key and type
  Put<uint32_t>(&b, value, 48);
  EXPECT_THAT(OpenBytes(b).message(), HasSubstr("power of two"));
  Put<uint32_t>(&b, value, 0);
  EXPECT_FALSE(OpenBytes(b).ok());
}

// Flip bits in every header byte; the parser may accept or reject, but must never crash.
TEST(GgufFile, BitFlipsInHeaderNeverCrash) {
  const std::vector<uint8_t> orig = ReadBytes(Fixture("tiny_v3.gguf"));
  const size_t header_end = std::min<size_t>(orig.size(), 1152);  // first tensor data
  int failures = 0;
  for (size_t pos = 0; pos < header_end; ++pos) {
    for (uint8_t mask : {0x01, 0xff}) {
      std::vector<uint8_t> b = orig;
      b[pos] ^= mask;
      failures += !OpenBytes(b).ok();
    }
  }
  EXPECT_GT(failures, 0);
}

// The real model, when present (CI downloads it to models/).
TEST(GgufFile, OpensSmolLM2IfPresent) {
  const std::string path = std::string(DQ_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not downloaded";
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors().size(), 272u);
  EXPECT_EQ(*(*f)->GetInt("llama.block_count"), 30);
  EXPECT_EQ(*(*f)->GetInt("llama.embedding_length"), 576);
  EXPECT_EQ((**(*f)->GetStringArray("tokenizer.ggml.tokens")).size(), 49152u);
  const TensorView* emb = (*f)->Find("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dtype, DType::kQ8_0);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{49152, 576}));
  const TensorView* down = (*f)->Find("blk.0.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->dtype, DType::kQ4_1);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{576, 1536}));
}

}  // namespace
}  // namespace dq
