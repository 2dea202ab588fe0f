// Which device a worker computes on: "cpu", "cuda" (GPU 0) or "cuda:N" (GPU N as this process
// sees it, i.e. after CUDA_VISIBLE_DEVICES / a container's GPU reservation). Parsed here so that
// the deployment config, `dqserve up` and the workers agree on the spelling.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace dq {

struct DeviceSpec {
  bool cuda = false;
  int index = 0;  // the GPU's ordinal; 0 on the CPU

  // The canonical spelling: "cpu" or "cuda:N".
  std::string name() const;
  bool operator==(const DeviceSpec&) const = default;
};

// Parses "cpu", "cuda" or "cuda:N" (N a decimal ordinal < 1024). InvalidArgument naming the
// accepted spellings otherwise.
absl::StatusOr<DeviceSpec> ParseDeviceSpec(std::string_view text);

}  // namespace dq
