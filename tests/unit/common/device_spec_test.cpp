#include "common/device_spec.h"

#include <gtest/gtest.h>

namespace dq {
namespace {

TEST(ParseDeviceSpec, AcceptsCpuCudaAndCudaN) {
  EXPECT_EQ(*ParseDeviceSpec("cpu"), (DeviceSpec{false, 0}));
  EXPECT_EQ(*ParseDeviceSpec("cuda"), (DeviceSpec{true, 0}));
  EXPECT_EQ(*ParseDeviceSpec("cuda:0"), (DeviceSpec{true, 0}));
  EXPECT_EQ(*ParseDeviceSpec("cuda:7"), (DeviceSpec{true, 7}));
  EXPECT_EQ(*ParseDeviceSpec("cuda:1023"), (DeviceSpec{true, 1023}));
  EXPECT_EQ(ParseDeviceSpec("cuda")->name(), "cuda:0");
  EXPECT_EQ(ParseDeviceSpec("cpu")->name(), "cpu");
}

TEST(ParseDeviceSpec, RefusesOtherSpellingsNamingTheValidOnes) {
  for (const char* bad : {"", "gpu", "CPU", "cuda:", "cuda:-1", "cuda:1x", "cuda:1024",
                          "cuda:99999", "cuda0", " cuda", "cuda:0:1"}) {
    auto d = ParseDeviceSpec(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(d.status().message().find("cpu, cuda, cuda:N"), std::string::npos) << d.status();
  }
}

}  // namespace
}  // namespace dq
