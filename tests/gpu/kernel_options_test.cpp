// KernelOptions (engine/cuda/kernel_options.h): the text form, its round trip, and the start-up
// validation's messages. Host code only; runs without a GPU. The variants themselves are checked
// against the CPU in attention_test.cpp (PrefillKernelVariantsMatchCpu), weight_only_test.cpp
// (GemvIntTileOptionsMatchCpu) and nvfp4_native_test.cpp (PathSelection and the forced paths).
#include "engine/cuda/kernel_options.h"

#include <gtest/gtest.h>

#include <string>

namespace dq::cuda {
namespace {

TEST(KernelOptions, DefaultsAreTheMeasuredWinners) {
  const KernelOptions k;
  EXPECT_EQ(k.prefill_attention, PrefillAttentionKernel::kWgmma64);
  EXPECT_EQ(k.nvfp4_gemm, Nvfp4Gemm::kAuto);
  EXPECT_EQ(k.int_tile.ctas_per_sm, 2);
  EXPECT_TRUE(k.int_tile.cluster);
  EXPECT_TRUE(ValidateKernelOptions(k).ok());
  EXPECT_EQ(KernelOptionsToString(k),
            "prefill_attention=wg64pp,nvfp4_gemm=auto,int_tile_ctas_per_sm=2,int_tile_cluster=on,"
            "persistent_decode=off,persistent_ctas_per_sm=1");
}

TEST(KernelOptions, ParsesEveryKey) {
  EXPECT_EQ(KernelOptionsToString(ParseKernelOptions("").value()),
            KernelOptionsToString(KernelOptions{}));
  const auto k = ParseKernelOptions(
      " prefill_attention = wg128pp ,nvfp4_gemm=unpack,, int_tile_ctas_per_sm=4,"
      "int_tile_cluster=off ");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->prefill_attention, PrefillAttentionKernel::kWgmma128);
  EXPECT_EQ(k->nvfp4_gemm, Nvfp4Gemm::kUnpack);
  EXPECT_EQ(k->int_tile.ctas_per_sm, 4);
  EXPECT_FALSE(k->int_tile.cluster);
  // The text form reads back to the same options.
  const std::string text = KernelOptionsToString(*k);
  EXPECT_EQ(KernelOptionsToString(ParseKernelOptions(text).value()), text);
  EXPECT_EQ(ParseKernelOptions("nvfp4_gemm=native").value().nvfp4_gemm, Nvfp4Gemm::kNative);
  EXPECT_TRUE(ParseKernelOptions("persistent_decode=on").value().persistent_decode);
  EXPECT_EQ(ParseKernelOptions("persistent_ctas_per_sm=2").value().persistent_ctas_per_sm, 2);
  EXPECT_EQ(ParseKernelOptions("prefill_attention=wg64pp").value().prefill_attention,
            PrefillAttentionKernel::kWgmma64);
}

// Each error names what was wrong and what is allowed.
TEST(KernelOptions, RejectsWithAMessageThatSaysWhatToDo) {
  const auto expect_error = [](const std::string& spec, const std::string& says) {
    const auto k = ParseKernelOptions(spec);
    ASSERT_FALSE(k.ok()) << spec;
    EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << spec;
    EXPECT_NE(k.status().message().find(says), std::string::npos) << k.status();
  };
  expect_error("prefill_attention=mma", "wg64pp (default) or wg128pp");
  expect_error("prefill_attention=ws64", "wg64pp (default) or wg128pp");
  expect_error("nvfp4_gemm=fp4", "native or unpack");
  expect_error("int_tile_ctas_per_sm=0", "1 to 8");
  expect_error("int_tile_ctas_per_sm=9", "1 to 8");
  expect_error("int_tile_ctas_per_sm=two", "an integer from 1 to 8");
  expect_error("int_tile_cluster=1", "on (default) or off");
  expect_error("persistent_ctas_per_sm=3", "1 (default) or 2");
  expect_error("persistent_ctas_per_sm=x", "1 (default) or 2");
  expect_error("decode_stages=4", "unknown key 'decode_stages'; the keys are prefill_attention");
  expect_error("prefill_attention", "is not key=value");
  expect_error("=wg64pp", "is not key=value");

  KernelOptions bad;
  bad.int_tile.ctas_per_sm = 0;
  const absl::Status s = ValidateKernelOptions(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("int_tile_ctas_per_sm=0"), std::string::npos) << s;
  bad = KernelOptions{};
  bad.prefill_attention = static_cast<PrefillAttentionKernel>(7);
  EXPECT_FALSE(ValidateKernelOptions(bad).ok());
  bad = KernelOptions{};
  bad.nvfp4_gemm = static_cast<Nvfp4Gemm>(-1);
  EXPECT_FALSE(ValidateKernelOptions(bad).ok());
}

}  // namespace
}  // namespace dq::cuda
