// The compute backend and KV staging behind a worker's --device. Implemented by
// device_backend_cuda.cpp in a CUDA build and device_backend_cpu_only.cpp otherwise, where
// asking for a GPU is an error that says how to get one; so the workers need no #ifdef.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/device_spec.h"
#include "common/status.h"
#include "engine/model/model_runner.h"
#include "worker_common/kv_staging.h"

namespace dq::worker {

// Offloaded disaggregated prefill on the worker's GPU (docs/odp.md, engine/cuda/odp_backend.h):
// the runner's decode-phase weights stay resident and prefill short passes, its prefill weights
// are streamed per pass from an image file (or pinned host memory) for passes of at least
// crossover_tokens tokens.
struct OdpBackendOptions {
  bool enabled = false;
  int64_t crossover_tokens = 0;  // 0: measured at start-up
  int slots = 2;
  bool pinned_host = false;  // else the image file at image_path
  std::string image_path;
};

struct DeviceBackendOptions {
  // Most tokens in one forward pass (prefill: the token budget); 0: the backend's default. The
  // decode worker keeps the default: its captured steps must find their scratch reserved.
  int max_batch_tokens = 0;
  // Whether decode steps may be replayed as CUDA graphs. A replayed step calls no per-layer
  // hook, so the prefill worker (whose one-token chunks look like decode steps) turns them off.
  bool graphs = true;
  OdpBackendOptions odp;
  // Decode steps independent of their batch-mates (cuda::CudaBackendOptions::batch_invariant).
  bool batch_invariant = false;
  // Prefill attention in FP8 for a phase whose linears all compute in FP8 W8A8 (ODP: the
  // streamed prefill model); other models ignore it (cuda::CudaBackendOptions::fp8_attention).
  bool fp8_attention = false;
  // Kernel choices on a GPU (--cuda-kernels; cuda::ParseKernelOptions in
  // engine/cuda/kernel_options.h: comma-separated key=value pairs; empty: the defaults).
  // BackendForDevice refuses a bad one, and any on the CPU, with InvalidArgument.
  std::string cuda_kernels;
};

// Whether this binary has the CUDA backend.
bool BuiltWithCuda();

// The CPU backend's answer to `options` (both builds): GPU-only options are refused.
inline absl::Status CheckCpuBackendOptions(const DeviceSpec& device,
                                           const DeviceBackendOptions& options) {
  if (options.cuda_kernels.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--cuda-kernels is for a GPU (--device cuda[:N]), got --device ", device.name()));
}

// The ModelRunner backend for `device`: empty (the CPU backend) for the CPU. FailedPrecondition
// when this build has no CUDA, no CUDA device is usable, or the GPU's index does not exist.
// Checked before any weight is read, so a wrong device fails at once.
absl::StatusOr<BackendFactory> BackendForDevice(const DeviceSpec& device,
                                                const DeviceBackendOptions& options);

// Whether the prefill passes of a runner made with BackendForDevice (with ODP: its streamed
// passes) run attention in FP8: asked for, and the model qualifies (cuda::CudaModelStats; on
// the CPU, emulated: ModelRunner::CpuPrefillUsesFp8Attention).
bool PrefillUsesFp8Attention(const ModelRunner& runner);

// The KV staging of a runner made with BackendForDevice(device) for a GPU.
absl::StatusOr<std::unique_ptr<KvStaging>> CreateDeviceKvStaging(ModelRunner& runner,
                                                                 const DeviceSpec& device);

}  // namespace dq::worker
