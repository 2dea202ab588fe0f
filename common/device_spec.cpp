#include "common/device_spec.h"

#include "absl/strings/str_cat.h"

namespace dq {

std::string DeviceSpec::name() const { return cuda ? absl::StrCat("cuda:", index) : "cpu"; }

absl::StatusOr<DeviceSpec> ParseDeviceSpec(std::string_view text) {
  if (text == "cpu") return DeviceSpec{};
  if (text == "cuda") return DeviceSpec{true, 0};
  constexpr std::string_view kPrefix = "cuda:";
  if (text.starts_with(kPrefix)) {
    const std::string_view digits = text.substr(kPrefix.size());
    int index = 0;
    bool ok = !digits.empty() && digits.size() <= 4;
    for (char c : digits) {
      ok = ok && c >= '0' && c <= '9';
      if (ok) index = index * 10 + (c - '0');
    }
    if (ok && index < 1024) return DeviceSpec{true, index};
  }
  return absl::InvalidArgumentError(absl::StrCat("device \"", std::string(text),
                                                 "\" is not one of cpu, cuda, cuda:N (N = the "
                                                 "GPU's index, e.g. cuda:0)"));
}

}  // namespace dq
