#include "engine/quant/gptq_import.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint/safetensors_checkpoint.h"
#include "engine/quant/int_codec.h"

namespace dq {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::unique_ptr<SafetensorsCheckpoint> Fixture(const std::string& name) {
  auto ck = SafetensorsCheckpoint::Open(std::string(DQ_SOURCE_DIR) + "/tests/fixtures/quant/" +
                                        name + ".safetensors");
  EXPECT_TRUE(ck.ok()) << ck.status();
  return ck.ok() ? std::move(*ck) : nullptr;
}

// Imports `prefix` and checks that every row dequantizes bit-exactly to `<prefix>.expected`
// (written by make_gptq_fixtures.py, whose packing matches AutoGPTQ's / AutoAWQ's own).
void ExpectImportMatches(const Checkpoint& ck, const std::string& prefix, int bits, int group,
                         bool sym, bool awq, int want_group) {
  SCOPED_TRACE(prefix);
  auto q = ImportGptqLinear(ck, prefix, bits, group, sym, awq);
  ASSERT_TRUE(q.ok()) << q.status();
  const WeightCodec* codec = IntCodec(bits);
  ASSERT_TRUE(codec->Validate(q->view, prefix).ok()) << codec->Validate(q->view, prefix);
  EXPECT_EQ(q->view.scheme, absl::StrCat("int", bits));
  EXPECT_EQ(q->view.group_size, want_group);
  const TensorView* want = ck.Find(prefix + ".expected");
  ASSERT_NE(want, nullptr);
  ASSERT_EQ(want->shape, (std::vector<int64_t>{q->view.out_features, q->view.in_features}));
  const int64_t in = q->view.in_features;
  std::vector<float> row(in), expect(in);
  for (int64_t r = 0; r < q->view.out_features; ++r) {
    codec->DequantizeRow(q->view, r, row.data());
    std::memcpy(expect.data(), want->data + r * in * 4, in * 4);
    ASSERT_EQ(row, expect) << "row " << r;
  }
}

TEST(GptqImport, Int4GptqAndAwqFixtures) {
  auto ck = Fixture("gptq_awq_int4");
  ASSERT_NE(ck, nullptr);
  ExpectImportMatches(*ck, "gptq4", 4, 32, false, false, 32);
  ExpectImportMatches(*ck, "awq4", 4, 32, false, true, 32);
}

TEST(GptqImport, OtherWidthsGroupsAndGroupOrders) {
  auto ck = Fixture("gptq_more");
  ASSERT_NE(ck, nullptr);
  ExpectImportMatches(*ck, "gptq3", 3, 32, false, false, 32);    // words straddled by codes
  ExpectImportMatches(*ck, "gptq8sym", 8, -1, true, false, 64);  // one group, symmetric
  ExpectImportMatches(*ck, "gptq2", 2, 64, false, false, 64);
  ExpectImportMatches(*ck, "gptq4perm", 4, 32, false, false, 32);  // g_idx runs out of order
}

TEST(GptqImport, InterleavedActOrderIsAClearError) {
  auto ck = Fixture("gptq_more");
  ASSERT_NE(ck, nullptr);
  auto q = ImportGptqLinear(*ck, "gptq4act", 4, 32, false, false);
  EXPECT_EQ(q.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(q.status().message(),
              AllOf(HasSubstr("gptq4act"), HasSubstr("act-order"), HasSubstr("desc_act=false")));
}

// An in-memory checkpoint for hand-made tensors.
class FakeCheckpoint : public Checkpoint {
 public:
  template <typename T>
  void Add(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<T> v) {
    auto bytes = std::make_shared<std::vector<uint8_t>>(v.size() * sizeof(T));
    // memcpy with a null source is undefined even for 0 bytes (UBSan reports it).
    if (!v.empty()) std::memcpy(bytes->data(), v.data(), bytes->size());
    owned_.push_back(bytes);
    tensors_.push_back(
        {name, dtype, std::move(shape), bytes->data(), static_cast<int64_t>(bytes->size())});
  }
  std::string_view format() const override { return "fake"; }
  const std::vector<TensorView>& tensors() const override { return tensors_; }
  const TensorView* Find(std::string_view name) const override {
    for (const TensorView& t : tensors_) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }

 private:
  std::vector<std::shared_ptr<std::vector<uint8_t>>> owned_;
  std::vector<TensorView> tensors_;
};

// A 4-bit GPTQ layer, out 8, in 32, one group: every code 5, every v1 zero field `zfield`.
FakeCheckpoint SmallGptq(uint32_t zfield) {
  FakeCheckpoint ck;
  ck.Add("l.qweight", DType::kI32, {4, 8}, std::vector<uint32_t>(32, 0x55555555u));
  ck.Add("l.qzeros", DType::kI32, {1, 1}, std::vector<uint32_t>{zfield * 0x11111111u});
  ck.Add("l.scales", DType::kF16, {1, 8}, std::vector<uint16_t>(8, F32ToF16(0.5f)));
  return ck;
}

TEST(GptqImport, V1ZeroFieldOfAllOnesReadsAsSixteenLikeVllm) {
  FakeCheckpoint ck = SmallGptq(15);
  auto q = ImportGptqLinear(ck, "l", 4, 32, false, false);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->view.parts.at("zeros").data[0], 16);
  std::vector<float> row(32);
  IntCodec(4)->DequantizeRow(q->view, 0, row.data());
  EXPECT_EQ(row[0], (5 - 16) * 0.5f);
  // An ordinary field: stored 7 means z = 8.
  FakeCheckpoint ck7 = SmallGptq(7);
  q = ImportGptqLinear(ck7, "l", 4, -1, false, false);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->view.parts.at("zeros").data[0], 8);
  EXPECT_EQ(q->view.group_size, 32);
}

TEST(GptqImport, ErrorsNameTheTensor) {
  FakeCheckpoint ck = SmallGptq(7);
  auto q = ImportGptqLinear(ck, "missing", 4, 32, false, false);
  EXPECT_EQ(q.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(q.status().message(), HasSubstr("'missing.qweight'"));
  q = ImportGptqLinear(ck, "l", 4, 16, true, false);  // 2 groups, but scales hold 1
  EXPECT_THAT(q.status().message(), AllOf(HasSubstr("'l.scales'"), HasSubstr("expected [2, 8]")));
  q = ImportGptqLinear(ck, "l", 4, 0, false, false);
  EXPECT_THAT(q.status().message(), HasSubstr("group size 0"));
  q = ImportGptqLinear(ck, "l", 3, 32, false, true);
  EXPECT_EQ(q.status().code(), absl::StatusCode::kUnimplemented);
  q = ImportGptqLinear(ck, "l", 5, 32, false, false);
  EXPECT_THAT(q.status().message(), HasSubstr("2, 3, 4 or 8 bits"));

  FakeCheckpoint f32 = SmallGptq(7);
  f32.Add("m.qweight", DType::kI32, {4, 8}, std::vector<uint32_t>(32, 0));
  f32.Add("m.scales", DType::kF32, {1, 8}, std::vector<float>(8, 0.5f));
  q = ImportGptqLinear(f32, "m", 4, 32, true, false);
  EXPECT_THAT(q.status().message(), AllOf(HasSubstr("'m.scales'"), HasSubstr("f16")));

  FakeCheckpoint gi = SmallGptq(7);
  gi.Add("l.g_idx", DType::kI32, {32}, std::vector<int32_t>(32, 3));
  q = ImportGptqLinear(gi, "l", 4, 32, false, false);
  EXPECT_THAT(q.status().message(), AllOf(HasSubstr("'l.g_idx'"), HasSubstr("group 3")));

  FakeCheckpoint empty;
  empty.Add("e.qweight", DType::kI32, {0, 8}, std::vector<uint32_t>{});
  empty.Add("e.scales", DType::kF16, {1, 8}, std::vector<uint16_t>(8, 0));
  q = ImportGptqLinear(empty, "e", 4, -1, true, false);
  EXPECT_THAT(q.status().message(), AllOf(HasSubstr("'e.qweight'"), HasSubstr("[0, 8]")));

  FakeCheckpoint z8;  // 8-bit v1 zero field 255 would be z = 256
  z8.Add("l.qweight", DType::kI32, {8, 4}, std::vector<uint32_t>(32, 0));
  z8.Add("l.qzeros", DType::kI32, {1, 1}, std::vector<uint32_t>{0xFFFFFFFFu});
  z8.Add("l.scales", DType::kF16, {1, 4}, std::vector<uint16_t>(4, F32ToF16(0.5f)));
  q = ImportGptqLinear(z8, "l", 8, 32, false, false);
  EXPECT_THAT(q.status().message(), AllOf(HasSubstr("'l.qzeros'"), HasSubstr("256")));
}

}  // namespace
}  // namespace dq
