// device_backend.h in a CUDA build: the CUDA backend bound to the worker's GPU, and KV staging
// through page-locked host buffers with cudaMemcpyAsync on streams of its own.
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/kernel_options.h"
#include "engine/cuda/odp_backend.h"
#include "worker_common/completion_thread.h"
#include "worker_common/device_backend.h"

namespace dq::worker {
namespace {

absl::Status CudaError(cudaError_t e, std::string_view what) {
  return absl::InternalError(
      absl::StrCat(std::string(what), ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

#define DQ_CUDA_RETURN_IF_ERROR(expr, what) \
  do {                                      \
    const cudaError_t dq_cuda_e = (expr);   \
    if (dq_cuda_e != cudaSuccess) {         \
      return CudaError(dq_cuda_e, what);    \
    }                                       \
  } while (0)

// Runs every forward pass on the worker's GPU whichever thread calls it: the runtime's current
// device is per thread, and the engine threads are not the one that built the model.
class DeviceBoundModel final : public ForwardModel {
 public:
  DeviceBoundModel(std::shared_ptr<ForwardModel> inner, int device)
      : inner_(std::move(inner)), device_(device) {}

  const ModelConfig& config() const override { return inner_->config(); }
  std::string_view backend() const override { return inner_->backend(); }
  absl::Status Forward(const Batch& batch, KvBlockPool& pool, ThreadPool& threads,
                       BatchLogits* logits, const ForwardHooks& hooks) const override {
    DQ_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "selecting the worker's GPU");
    return inner_->Forward(batch, pool, threads, logits, hooks);
  }
  bool SupportsDeviceSampling() const override { return inner_->SupportsDeviceSampling(); }
  absl::Status ForwardSample(const Batch& batch, KvBlockPool& pool, ThreadPool& threads,
                             std::span<const DeviceSampling> per_item,
                             std::span<int32_t> out_tokens,
                             const ForwardHooks& hooks) const override {
    DQ_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "selecting the worker's GPU");
    return inner_->ForwardSample(batch, pool, threads, per_item, out_tokens, hooks);
  }

  const cuda::CudaDecoderModel& cuda_model() const {
    // ODP: both sides run on the resident model's stream and KV cache.
    if (const auto* odp = dynamic_cast<const OdpForwardModel*>(inner_.get())) {
      return static_cast<const cuda::CudaDecoderModel&>(odp->resident());
    }
    return static_cast<const cuda::CudaDecoderModel&>(*inner_);
  }
  // The model of the prefill passes (ODP: of the streamed ones).
  const cuda::CudaDecoderModel& prefill_cuda_model() const {
    if (const auto* odp = dynamic_cast<const OdpForwardModel*>(inner_.get())) {
      return static_cast<const cuda::CudaDecoderModel&>(odp->streamed());
    }
    return static_cast<const cuda::CudaDecoderModel&>(*inner_);
  }

 private:
  std::shared_ptr<ForwardModel> inner_;
  int device_;
};

// Up to this many bytes of freed staging buffers stay page-locked for the next leases.
constexpr uint64_t kPinnedCacheBytes = uint64_t{2} << 30;

class CudaKvStaging final : public KvStaging {
 public:
  CudaKvStaging(const cuda::CudaDecoderModel& model, int device)
      : device_(device),
        model_stream_(model.stream()),
        buffers_(
            [device](uint64_t bytes) -> absl::StatusOr<void*> {
              void* p = nullptr;
              DQ_CUDA_RETURN_IF_ERROR(cudaSetDevice(device), "selecting the worker's GPU");
              const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
              if (e != cudaSuccess) {
                return CudaError(e,
                                 absl::StrCat("page-locking a ", bytes, "-byte KV staging buffer"));
              }
              return p;
            },
            [](void* p) { cudaFreeHost(p); }, kPinnedCacheBytes),
        completions_([device] { cudaSetDevice(device); }) {
    const KvCacheOptions& o = model.kv_cache().options();
    const cuda::KvCacheLayer first = model.kv_cache().layer(0);
    geometry_ = model.kv_cache().layout();
    tensors_[kKeys] = reinterpret_cast<char*>(first.k);
    tensors_[kValues] = reinterpret_cast<char*>(first.v);
  }

  absl::Status Init() {
    DQ_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "selecting the worker's GPU");
    DQ_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&in_stream_, cudaStreamNonBlocking),
                            "creating the KV copy-in stream");
    DQ_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&out_stream_, cudaStreamNonBlocking),
                            "creating the KV copy-out stream");
    return absl::OkStatus();
  }

  ~CudaKvStaging() override {
    completions_.Drain();
    cudaSetDevice(device_);
    if (in_stream_) cudaStreamDestroy(in_stream_);
    if (out_stream_) cudaStreamDestroy(out_stream_);
    for (const Events& e : free_events_) {
      cudaEventDestroy(e.written);
      cudaEventDestroy(e.copied);
    }
  }

  std::string_view kv_dtype() const override { return "bf16"; }
  const KvTensorLayout& geometry() const override { return geometry_; }
  char* host_tensor(int) override { return nullptr; }
  char* device_tensor(int t) override { return tensors_[t]; }
  int cuda_device() const override { return device_; }

  absl::StatusOr<std::unique_ptr<HostBuffer>> AllocateHost(uint64_t bytes) override {
    return buffers_.Get(bytes);
  }

  absl::Status CopyIn(std::span<const KvCopy> copies, const char* host) override {
    DQ_RETURN_IF_ERROR(Check(copies));
    std::lock_guard lock(in_mu_);
    DQ_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "selecting the worker's GPU");
    for (const KvCopy& c : copies) {
      DQ_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(tensors_[c.tensor] + c.cache_offset, host + c.host_offset, c.bytes,
                          cudaMemcpyHostToDevice, in_stream_),
          "copying staged KV to the GPU");
    }
    DQ_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(in_stream_), "copying staged KV to the GPU");
    return absl::OkStatus();
  }

  void CopyOut(std::vector<KvCopy> copies, char* host,
               std::function<void(absl::Status)> then) override {
    absl::StatusOr<Events> events = Enqueue(copies, host);
    if (!events.ok()) {
      completions_.Push([s = events.status()] { return s; }, std::move(then));
      return;
    }
    completions_.Push(
        [this, e = *events]() -> absl::Status {
          const cudaError_t err = cudaEventSynchronize(e.copied);
          Recycle(e);
          if (err != cudaSuccess) return CudaError(err, "copying KV from the GPU");
          return absl::OkStatus();
        },
        std::move(then));
  }

  void Drain() override { completions_.Drain(); }

 private:
  struct Events {
    cudaEvent_t written = nullptr;  // on the model's stream: the layer's KV is written
    cudaEvent_t copied = nullptr;   // on ours: the copies are done
  };

  absl::Status Check(std::span<const KvCopy> copies) const {
    return CheckKvCopies(copies, geometry_);
  }

  // Queues the copies on our stream behind what the model's stream holds now.
  absl::StatusOr<Events> Enqueue(const std::vector<KvCopy>& copies, char* host) {
    DQ_RETURN_IF_ERROR(Check(copies));
    DQ_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "selecting the worker's GPU");
    DQ_ASSIGN_OR_RETURN(Events e, TakeEvents());
    DQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(e.written, model_stream_), "ordering a KV copy-out");
    DQ_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(out_stream_, e.written, 0),
                            "ordering a KV copy-out");
    for (const KvCopy& c : copies) {
      DQ_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(host + c.host_offset, tensors_[c.tensor] + c.cache_offset, c.bytes,
                          cudaMemcpyDeviceToHost, out_stream_),
          "copying KV from the GPU");
    }
    DQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(e.copied, out_stream_), "ordering a KV copy-out");
    return e;
  }

  absl::StatusOr<Events> TakeEvents() {
    {
      std::lock_guard lock(events_mu_);
      if (!free_events_.empty()) {
        Events e = free_events_.back();
        free_events_.pop_back();
        return e;
      }
    }
    Events e;
    DQ_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e.written, cudaEventDisableTiming),
                            "creating a CUDA event");
    // The completion thread sleeps on this one rather than spinning a core.
    DQ_CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&e.copied, cudaEventDisableTiming | cudaEventBlockingSync),
        "creating a CUDA event");
    return e;
  }

  void Recycle(const Events& e) {
    std::lock_guard lock(events_mu_);
    free_events_.push_back(e);
  }

  const int device_;
  const cudaStream_t model_stream_;
  KvTensorLayout geometry_;
  char* tensors_[2] = {nullptr, nullptr};
  cudaStream_t in_stream_ = nullptr;
  cudaStream_t out_stream_ = nullptr;
  std::mutex in_mu_;  // CopyIn calls share in_stream_
  std::mutex events_mu_;
  std::vector<Events> free_events_;
  HostBufferCache buffers_;
  CompletionThread completions_;  // last: stopped first, while the rest still exists
};

}  // namespace

bool BuiltWithCuda() { return true; }

absl::StatusOr<BackendFactory> BackendForDevice(const DeviceSpec& device,
                                                const DeviceBackendOptions& options) {
  if (!device.cuda) {
    DQ_RETURN_IF_ERROR(CheckCpuBackendOptions(device, options));
    return BackendFactory{};
  }
  // Checked before the device, so that a bad value fails the same on any machine.
  absl::StatusOr<cuda::KernelOptions> kernels = cuda::ParseKernelOptions(options.cuda_kernels);
  if (!kernels.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--cuda-kernels: ", kernels.status().message()));
  }
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device ", device.name(), ": no usable CUDA device (",
                     e != cudaSuccess ? cudaGetErrorString(e) : "none found",
                     "); check the driver and CUDA_VISIBLE_DEVICES, or use --device cpu"));
  }
  if (device.index >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device ", device.name(), ": this process sees ", count,
                     " CUDA device(s) (cuda:0 to cuda:", count - 1,
                     "); indices count the GPUs CUDA_VISIBLE_DEVICES or the container exposes"));
  }
  cuda::CudaBackendOptions co;
  co.device = device.index;
  if (options.max_batch_tokens > 0) co.max_batch_tokens = options.max_batch_tokens;
  co.use_graphs = options.graphs;
  co.batch_invariant = options.batch_invariant;
  co.fp8_attention = options.fp8_attention;
  co.kernels = *kernels;
  BackendFactory inner = cuda::CudaBackendFactory(co);
  if (options.odp.enabled) {
    cuda::OdpOptions odp;
    odp.crossover_tokens = options.odp.crossover_tokens;
    odp.stream.slots = options.odp.slots;
    odp.stream.source =
        options.odp.pinned_host ? cuda::WeightSource::kPinnedHost : cuda::WeightSource::kFile;
    odp.stream.image_path = options.odp.image_path;
    inner = cuda::OdpBackendFactory(co, odp);
  }
  const int index = device.index;
  return BackendFactory([inner, index](const DecoderModel& prefill, const DecoderModel& decode,
                                       const KvCacheOptions& kv) -> absl::StatusOr<BackendModels> {
    DQ_ASSIGN_OR_RETURN(BackendModels m, inner(prefill, decode, kv));
    BackendModels out;
    out.decode = std::make_shared<DeviceBoundModel>(m.decode, index);
    out.prefill =
        m.prefill == m.decode ? out.decode : std::make_shared<DeviceBoundModel>(m.prefill, index);
    return out;
  });
}

bool PrefillUsesFp8Attention(const ModelRunner& runner) {
  const auto* bound = dynamic_cast<const DeviceBoundModel*>(&runner.forward_model(Phase::kPrefill));
  if (bound == nullptr) return runner.CpuPrefillUsesFp8Attention();
  return bound->prefill_cuda_model().stats().fp8_attention;
}

absl::StatusOr<std::unique_ptr<KvStaging>> CreateDeviceKvStaging(ModelRunner& runner,
                                                                 const DeviceSpec& device) {
  const auto* bound = dynamic_cast<const DeviceBoundModel*>(&runner.forward_model(Phase::kPrefill));
  if (bound == nullptr || !device.cuda) {
    return absl::InternalError(absl::StrCat("the model runner was not built for --device ",
                                            device.name(), " (BackendForDevice)"));
  }
  // The prefill model's stream: the prefill worker copies out behind its forward passes.
  auto staging = std::make_unique<CudaKvStaging>(bound->cuda_model(), device.index);
  DQ_RETURN_IF_ERROR(staging->Init());
  return staging;
}

}  // namespace dq::worker
