// device_backend.h in a build without CUDA: only the CPU exists.
#include "absl/strings/str_cat.h"
#include "worker_common/device_backend.h"

namespace dq::worker {
namespace {

absl::Status NoCuda(const DeviceSpec& device) {
  return absl::FailedPreconditionError(
      absl::StrCat("--device ", device.name(),
                   ": this binary was built without CUDA; build it with the release-cuda preset "
                   "(cmake --preset release-cuda) or use --device cpu"));
}

}  // namespace

bool BuiltWithCuda() { return false; }

absl::StatusOr<BackendFactory> BackendForDevice(const DeviceSpec& device,
                                                const DeviceBackendOptions& options) {
  if (!device.cuda) {
    DQ_RETURN_IF_ERROR(CheckCpuBackendOptions(device, options));
    return BackendFactory{};
  }
  return NoCuda(device);
}

bool PrefillUsesFp8Attention(const ModelRunner& runner) {
  return runner.CpuPrefillUsesFp8Attention();
}

absl::StatusOr<std::unique_ptr<KvStaging>> CreateDeviceKvStaging(ModelRunner&,
                                                                 const DeviceSpec& device) {
  return NoCuda(device);
}

}  // namespace dq::worker
