#include "engine/checkpoint/safetensors_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/checkpoint/gguf_file.h"
#include "engine/checkpoint/open_checkpoint.h"
#include "engine/quant/ggml_blocks.h"

namespace dq {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string Fixture(const std::string& name) {
  return std::string(DQ_SOURCE_DIR) + "/tests/fixtures/checkpoints/" + name;
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// A fresh per-process directory (ctest may run this binary's cases in parallel).
std::string TempDir(const std::string& name) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/dq_st_", ::getpid(), "_", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

// A safetensors file from a literal header and data section.
std::string MakeSt(const std::string& header, size_t data_bytes) {
  const uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + header + std::string(data_bytes, '\0');
}

std::vector<float> Values(const TensorView& t) {
  std::vector<float> out(t.numel());
  DequantizeRow(t.dtype, t.data, out.data(), t.numel());
  return out;
}

TEST(Safetensors, ReadsSingleFileWrittenBySafetensorsPackage) {
  for (const std::string& path : {Fixture("st_single"), Fixture("st_single/model.safetensors")}) {
    auto ck = SafetensorsCheckpoint::Open(path);
    ASSERT_TRUE(ck.ok()) << ck.status();
    const SafetensorsCheckpoint& c = **ck;
    EXPECT_EQ(c.format(), "safetensors");
    ASSERT_EQ(c.tensors().size(), 4u);
    for (size_t i = 1; i < c.tensors().size(); ++i) {
      EXPECT_LT(c.tensors()[i - 1].data, c.tensors()[i].data);  // file order
    }
    const TensorView* embed = c.Find("embed.weight");
    ASSERT_NE(embed, nullptr);
    EXPECT_EQ(embed->dtype, DType::kF32);
    EXPECT_EQ(embed->shape, (std::vector<int64_t>{4, 3}));
    std::vector<float> want(12);
    for (int i = 0; i < 12; ++i) want[i] = i * 0.5f - 2.0f;
    EXPECT_EQ(Values(*embed), want);
    const TensorView* norm = c.Find("norm.weight");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->dtype, DType::kF16);
    EXPECT_EQ(Values(*norm), (std::vector<float>{1, -0.5, 0.25, 2048, -65504}));
    const TensorView* proj = c.Find("proj.weight");
    ASSERT_NE(proj, nullptr);
    EXPECT_EQ(proj->dtype, DType::kBF16);
    EXPECT_EQ(proj->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(Values(*proj), (std::vector<float>{1.0, -2.5, 0.15625, 256.0, -0.0078125, 96.0}));
    const TensorView* ids = c.Find("ids");
    ASSERT_NE(ids, nullptr);
    EXPECT_EQ(ids->dtype, DType::kI32);
    EXPECT_EQ(Values(*ids), (std::vector<float>{-1, 0, 123456}));
    EXPECT_EQ(c.file_metadata(),
              (std::map<std::string, std::string>{{"format", "pt"}, {"note", "dq fixture"}}));
  }
}

TEST(Safetensors, ReadsShardedDirectoryAndIndex) {
  for (const std::string& path :
       {Fixture("st_sharded"), Fixture("st_sharded/model.safetensors.index.json")}) {
    auto ck = SafetensorsCheckpoint::Open(path);
    ASSERT_TRUE(ck.ok()) << ck.status();
    const SafetensorsCheckpoint& c = **ck;
    ASSERT_EQ(c.tensors().size(), 3u);
    EXPECT_EQ(c.file_paths().size(), 2u);
    EXPECT_EQ(Values(*c.Find("a.weight")), (std::vector<float>{1, 2, 3, 4}));
    EXPECT_EQ(Values(*c.Find("b.bias")), (std::vector<float>{0.5, -1, 1.5, -2}));
    EXPECT_EQ(Values(*c.Find("c.weight")), (std::vector<float>{3.0, -0.375, 1024.0}));
    EXPECT_EQ(c.tensors().back().name, "c.weight");  // second shard comes last
    EXPECT_EQ(c.file_metadata().at("format"), "pt");
  }
}

TEST(Safetensors, WriterRoundTripsAndPadsHeader) {
  const std::string dir = TempDir("write");
  const std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -8.5f};
  const std::vector<uint16_t> f16 = {F32ToF16(0.5f), F32ToF16(-3.0f)};
  const std::vector<uint16_t> bf16 = {F32ToBF16(2.0f), F32ToBF16(-0.25f), F32ToBF16(64.0f)};
  const std::vector<int32_t> i32 = {42};
  const std::vector<SafetensorsEntry> entries = {
      {"w", DType::kF32, {2, 3}, f32.data()},   {"h", DType::kF16, {2}, f16.data()},
      {"b", DType::kBF16, {3, 1}, bf16.data()}, {"i", DType::kI32, {1}, i32.data()},
      {"empty", DType::kF32, {0, 4}, nullptr},
  };
  const std::string path = dir + "/model.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, entries, {{"format", "pt"}}).ok());
  const std::vector<uint8_t> bytes = ReadBytes(path);
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + header_len + 24 + 4 + 6 + 4);
  auto ck = SafetensorsCheckpoint::Open(dir);
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_EQ((*ck)->tensors().size(), 5u);
  EXPECT_EQ((*ck)->tensors()[0].name, "w");  // entries order is file order
  EXPECT_EQ(Values(*(*ck)->Find("w")), f32);
  EXPECT_EQ(Values(*(*ck)->Find("h")), (std::vector<float>{0.5f, -3.0f}));
  EXPECT_EQ(Values(*(*ck)->Find("b")), (std::vector<float>{2.0f, -0.25f, 64.0f}));
  EXPECT_EQ(Values(*(*ck)->Find("i")), (std::vector<float>{42.0f}));
  EXPECT_EQ((*ck)->Find("empty")->nbytes, 0);
  EXPECT_EQ((*ck)->file_metadata().at("format"), "pt");
}

TEST(Safetensors, WriterRejectsBadEntries) {
  const std::string path = TempDir("write_bad") + "/x.safetensors";
  const uint8_t block[18] = {};
  auto s = WriteSafetensors(path, {{"q", DType::kQ4_0, {32}, block}}, {});
  EXPECT_THAT(s.message(), HasSubstr("supported: F32, F16, BF16, I32"));
  const float f = 1;
  EXPECT_FALSE(
      WriteSafetensors(path, {{"a", DType::kF32, {1}, &f}, {"a", DType::kF32, {1}, &f}}, {}).ok());
  EXPECT_FALSE(WriteSafetensors(path, {{"__metadata__", DType::kF32, {1}, &f}}, {}).ok());
  EXPECT_FALSE(WriteSafetensors(path, {{"n", DType::kF32, {-1}, &f}}, {}).ok());
  EXPECT_FALSE(fs::exists(path));
}

TEST(Safetensors, RejectsCorruptHeaders) {
  const std::string dir = TempDir("corrupt");
  const std::string path = dir + "/bad.safetensors";
  auto open_err = [&](const std::string& bytes) {
    WriteFile(path, bytes);
    auto ck = SafetensorsCheckpoint::Open(path);
    EXPECT_FALSE(ck.ok());
    return std::string(ck.status().message());
  };
  const std::string ok_entry = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  WriteFile(path, MakeSt("{" + ok_entry + "}", 8));
  ASSERT_TRUE(SafetensorsCheckpoint::Open(path).ok());
  EXPECT_THAT(open_err("abc"), HasSubstr("shorter than"));
  EXPECT_THAT(open_err(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10)),
              HasSubstr("header length"));
  EXPECT_THAT(open_err(MakeSt("{not json", 0)), HasSubstr("not a valid JSON"));
  EXPECT_THAT(open_err(MakeSt("[1,2]", 0)), HasSubstr("not a valid JSON object"));
  EXPECT_THAT(open_err(MakeSt(R"({"t":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})", 16)),
              HasSubstr("tensor 't' has dtype F64"));
  EXPECT_THAT(open_err(MakeSt(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4)),
              HasSubstr("outside the 4-byte data section"));
  EXPECT_THAT(open_err(MakeSt(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)),
              HasSubstr("need 12"));
  EXPECT_THAT(open_err(MakeSt(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)),
              HasSubstr("bad shape"));
  EXPECT_THAT(open_err(MakeSt(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8)),
              HasSubstr("outside"));
  EXPECT_THAT(open_err(MakeSt(R"({"t":{"dtype":"F32","shape":[2]}})", 8)),
              HasSubstr("lacks dtype, shape or data_offsets"));
  EXPECT_THAT(open_err(MakeSt(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],)"
                              R"("data_offsets":[0,8]}})",
                              8)),
              HasSubstr("too many"));
  EXPECT_THAT(open_err(MakeSt(R"({"__metadata__":[1]})", 0)), HasSubstr("__metadata__"));
}

TEST(Safetensors, TruncatedAtEveryLengthFailsCleanly) {
  const std::vector<uint8_t> bytes = ReadBytes(Fixture("st_single/model.safetensors"));
  const std::string path = TempDir("trunc") + "/t.safetensors";
  for (size_t n = 1; n < bytes.size(); ++n) {
    WriteFile(path, std::string(reinterpret_cast<const char*>(bytes.data()), n));
    EXPECT_FALSE(SafetensorsCheckpoint::Open(path).ok()) << "prefix " << n;
  }
}

TEST(Safetensors, ShardedIndexErrors) {
  const std::string dir = TempDir("shard_err");
  for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
    fs::copy_file(Fixture(std::string("st_sharded/") + f), dir + "/" + f);
  }
  const std::string index = dir + "/model.safetensors.index.json";
  auto err = [&](const std::string& json) {
    WriteFile(index, json);
    return std::string(SafetensorsCheckpoint::Open(dir).status().message());
  };
  EXPECT_THAT(err(R"({"weight_map":{"zzz":"model-00001-of-00002.safetensors"}})"),
              HasSubstr("lists tensor 'zzz'"));
  EXPECT_THAT(err(R"({"weight_map":{"a.weight":"missing.safetensors"}})"),
              HasSubstr("does not exist"));
  EXPECT_THAT(err(R"({"weight_map":{"a.weight":"../x.safetensors"}})"),
              HasSubstr("plain file name"));
  EXPECT_THAT(err(R"({"metadata":{}})"), HasSubstr("no weight_map"));
  EXPECT_THAT(err("{"), HasSubstr("not a valid JSON"));
  // The same tensor in two shards.
  fs::copy_file(dir + "/model-00001-of-00002.safetensors", dir + "/dup.safetensors");
  EXPECT_THAT(err(R"({"weight_map":{"a.weight":"model-00001-of-00002.safetensors",)"
                  R"("b.bias":"dup.safetensors"}})"),
              HasSubstr("more than one shard"));
}

TEST(Safetensors, DirectoryWithoutWeights) {
  const std::string dir = TempDir("empty_dir");
  EXPECT_THAT(SafetensorsCheckpoint::Open(dir).status().message(),
              HasSubstr("has neither model.safetensors"));
  EXPECT_EQ(SafetensorsCheckpoint::Open(dir + "/nope").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(SafetensorsOpenCheckpoint, PicksFormat) {
  auto g = OpenCheckpoint(Fixture("tiny_v3.gguf"));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->format(), "gguf");
  EXPECT_NE(dynamic_cast<GgufFile*>(g->get()), nullptr);
  for (const char* p : {"st_single", "st_single/model.safetensors", "st_sharded"}) {
    auto s = OpenCheckpoint(Fixture(p));
    ASSERT_TRUE(s.ok()) << p << ": " << s.status();
    EXPECT_EQ((*s)->format(), "safetensors") << p;
  }
  // A directory holding a single .gguf.
  const std::string dir = TempDir("gguf_dir");
  fs::copy_file(Fixture("align64.gguf"), dir + "/m.gguf");
  auto d = OpenCheckpoint(dir);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->format(), "gguf");
  // A .gguf file with another name is still detected by its magic.
  fs::copy_file(Fixture("align64.gguf"), dir + "/weights.bin");
  EXPECT_TRUE(OpenCheckpoint(dir + "/weights.bin").ok());
}

TEST(SafetensorsOpenCheckpoint, ClearErrors) {
  auto missing = OpenCheckpoint("/nonexistent/model");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("model path /nonexistent/model does not exist; pass a .gguf file or a "
                        "directory with config.json and *.safetensors"));
  const std::string dir = TempDir("unknown");
  WriteFile(dir + "/notes.txt", "hello world, not a model");
  EXPECT_THAT(OpenCheckpoint(dir + "/notes.txt").status().message(),
              HasSubstr("cannot tell the format"));
  EXPECT_FALSE(OpenCheckpoint(dir).ok());
}

}  // namespace
}  // namespace dq
