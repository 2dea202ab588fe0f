#include "worker_common/kv_staging.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "worker_common/completion_thread.h"
#include "worker_common/device_backend.h"

namespace dq::worker {

absl::Status CheckKvCopies(std::span<const KvCopy> copies, const KvTensorLayout& geometry) {
  for (const KvCopy& c : copies) {
    if ((c.tensor != kKeys && c.tensor != kValues) ||
        c.cache_offset + c.bytes > geometry.tensor_bytes()) {
      return absl::OutOfRangeError(absl::StrCat("KV copy of ", c.bytes, " bytes at ",
                                                c.cache_offset, " is outside the cache (",
                                                geometry.tensor_bytes(), " bytes per tensor)"));
    }
  }
  return absl::OkStatus();
}

// ----------------------------------------------------------------------------------------------
// HostBufferCache

struct HostBufferCache::State {
  AllocateFn allocate;
  FreeFn free;
  uint64_t max_cached_bytes = 0;
  std::mutex mu;
  std::multimap<uint64_t, void*> free_buffers;  // by size
  uint64_t cached_bytes = 0;

  ~State() {
    for (auto& [bytes, p] : free_buffers) free(p);
  }
  void Return(void* p, uint64_t bytes) {
    {
      std::lock_guard lock(mu);
      if (cached_bytes + bytes <= max_cached_bytes) {
        free_buffers.emplace(bytes, p);
        cached_bytes += bytes;
        return;
      }
    }
    free(p);
  }
};

namespace {

class CachedBuffer final : public HostBuffer {
 public:
  CachedBuffer(std::shared_ptr<HostBufferCache::State> state, void* p, uint64_t bytes)
      : state_(std::move(state)), p_(p), bytes_(bytes) {}
  ~CachedBuffer() override { state_->Return(p_, bytes_); }
  char* data() override { return static_cast<char*>(p_); }
  uint64_t bytes() const override { return bytes_; }

 private:
  std::shared_ptr<HostBufferCache::State> state_;
  void* p_;
  uint64_t bytes_;
};

// Sizes are rounded up so that leases of about the same size share buffers.
constexpr uint64_t kGranule = uint64_t{1} << 20;

}  // namespace

HostBufferCache::HostBufferCache(AllocateFn allocate, FreeFn free, uint64_t max_cached_bytes)
    : state_(std::make_shared<State>()) {
  state_->allocate = std::move(allocate);
  state_->free = std::move(free);
  state_->max_cached_bytes = max_cached_bytes;
}

HostBufferCache::~HostBufferCache() = default;

absl::StatusOr<std::unique_ptr<HostBuffer>> HostBufferCache::Get(uint64_t bytes) {
  const uint64_t want = (std::max<uint64_t>(bytes, 1) + kGranule - 1) / kGranule * kGranule;
  {
    std::lock_guard lock(state_->mu);
    // The smallest free buffer that fits, unless it is more than twice what is asked.
    auto it = state_->free_buffers.lower_bound(want);
    if (it != state_->free_buffers.end() && it->first <= 2 * want) {
      auto [size, p] = *it;
      state_->free_buffers.erase(it);
      state_->cached_bytes -= size;
      return std::make_unique<CachedBuffer>(state_, p, size);
    }
  }
  DQ_ASSIGN_OR_RETURN(void* p, state_->allocate(want));
  return std::make_unique<CachedBuffer>(state_, p, want);
}

int HostBufferCache::cached_buffers() const {
  std::lock_guard lock(state_->mu);
  return static_cast<int>(state_->free_buffers.size());
}

uint64_t HostBufferCache::cached_bytes() const {
  std::lock_guard lock(state_->mu);
  return state_->cached_bytes;
}

// ----------------------------------------------------------------------------------------------
// The CPU pool: in place, or staged with memcpy (tests).

namespace {

constexpr uint64_t kHostCacheBytes = uint64_t{1} << 30;

class HostKvStaging final : public KvStaging {
 public:
  HostKvStaging(KvBlockPool& pool, bool staged, bool pool_as_device = false)
      : pool_(pool),
        staged_(staged),
        pool_as_device_(pool_as_device),
        buffers_(
            [](uint64_t bytes) -> absl::StatusOr<void*> {
              void* p = std::aligned_alloc(4096, bytes);  // bytes is a multiple of 1 MiB
              if (p == nullptr) {
                return absl::ResourceExhaustedError(
                    absl::StrCat("cannot allocate a ", bytes, "-byte KV staging buffer"));
              }
              return p;
            },
            [](void* p) { std::free(p); }, kHostCacheBytes) {
    geometry_ = pool.layout();
  }

  std::string_view kv_dtype() const override { return "f32"; }
  const KvTensorLayout& geometry() const override { return geometry_; }
  char* host_tensor(int t) override {
    if (staged_) return nullptr;
    return reinterpret_cast<char*>(t == kKeys ? pool_.keys_data() : pool_.values_data());
  }

  char* device_tensor(int t) override { return pool_as_device_ ? Tensor(t) : nullptr; }

  absl::StatusOr<std::unique_ptr<HostBuffer>> AllocateHost(uint64_t bytes) override {
    return buffers_.Get(bytes);
  }

  absl::Status CopyIn(std::span<const KvCopy> copies, const char* host) override {
    DQ_RETURN_IF_ERROR(Check(copies));
    for (const KvCopy& c : copies) {
      std::memcpy(Tensor(c.tensor) + c.cache_offset, host + c.host_offset, c.bytes);
    }
    return absl::OkStatus();
  }

  void CopyOut(std::vector<KvCopy> copies, char* host,
               std::function<void(absl::Status)> then) override {
    // On the completion thread, like a device's asynchronous copy: the forward pass has written
    // this layer already (the CPU backend is synchronous) and goes on with the next ones.
    completions_.Push(
        [this, copies = std::move(copies), host]() -> absl::Status {
          DQ_RETURN_IF_ERROR(Check(copies));
          for (const KvCopy& c : copies) {
            std::memcpy(host + c.host_offset, Tensor(c.tensor) + c.cache_offset, c.bytes);
          }
          return absl::OkStatus();
        },
        std::move(then));
  }

  void Drain() override { completions_.Drain(); }

 private:
  char* Tensor(int t) {
    return reinterpret_cast<char*>(t == kKeys ? pool_.keys_data() : pool_.values_data());
  }
  absl::Status Check(std::span<const KvCopy> copies) const {
    return CheckKvCopies(copies, geometry_);
  }

  KvBlockPool& pool_;
  const bool staged_;
  const bool pool_as_device_;
  KvTensorLayout geometry_;
  HostBufferCache buffers_;
  CompletionThread completions_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<KvStaging>> CreateKvStaging(ModelRunner& runner,
                                                           const DeviceSpec& device) {
  if (!device.cuda) {
    if (runner.backend() != "cpu") {
      return absl::InternalError(
          absl::StrCat("a ", std::string(runner.backend()), " runner was built for --device cpu"));
    }
    return std::unique_ptr<KvStaging>(new HostKvStaging(runner.kv_pool(), /*staged=*/false));
  }
  return CreateDeviceKvStaging(runner, device);
}

std::unique_ptr<KvStaging> CreateHostKvStaging(KvBlockPool& pool) {
  return std::make_unique<HostKvStaging>(pool, /*staged=*/false);
}

std::unique_ptr<KvStaging> CreateHostCopyKvStaging(KvBlockPool& pool, bool pool_as_device) {
  return std::make_unique<HostKvStaging>(pool, /*staged=*/true, pool_as_device);
}

}  // namespace dq::worker
