// How a worker's KV cache meets the KV transports. A CPU backend's cache is host memory:
// transports use it in place. A device cache goes straight to a transport that moves device
// memory (nccl: device_tensor(), with AfterWritten ordering the prefill's posts after the layer's
// compute). For the host-memory transports (tcp, ucx as built here, local) a device cache's KV
// travels through host staging buffers (page-locked on CUDA) with explicit copies, keeping the
// transport lifecycle unchanged:
//   decode:  a lease's transfer regions are a staging buffer of its own; once the lease is
//            committed, CopyIn moves it into the sequence's blocks (before its first step);
//   prefill: the per-layer hook calls CopyOut for the layer's fresh blocks, ordered after the
//            forward pass's queued work, and the layer is posted once they are in host memory,
//            while the forward pass goes on.
// Which host range goes to which cache block is each worker's plan (decode_worker/
// lease_staging.h, prefill_worker/kv_stager.h); this is the memory and the copies, one
// implementation per backend (the CUDA one in device_backend_cuda.cpp, built only with CUDA).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/device_spec.h"
#include "common/status.h"
#include "engine/kvcache/kv_block_pool.h"
#include "engine/model/model_runner.h"

namespace dq::worker {

// KV tensors, in the order of every [tensor] index here.
inline constexpr int kKeys = 0;
inline constexpr int kValues = 1;

// One contiguous copy of one tensor between a host buffer and the cache.
struct KvCopy {
  int tensor = kKeys;
  uint64_t host_offset = 0;   // from the host buffer's start
  uint64_t cache_offset = 0;  // from the tensor's start (KvTensorLayout::offset)
  uint64_t bytes = 0;
  bool operator==(const KvCopy&) const = default;
};

// OK when every copy names K or V and lies inside that tensor of `geometry`; otherwise an
// OutOfRange error naming the copy (both staging implementations check through this).
absl::Status CheckKvCopies(std::span<const KvCopy> copies, const KvTensorLayout& geometry);

// Host memory a transport may read and write (page-locked on CUDA, so copies are asynchronous
// and run at the link's speed). Freed, or returned to its cache, on destruction.
class HostBuffer {
 public:
  virtual ~HostBuffer() = default;
  virtual char* data() = 0;
  virtual uint64_t bytes() const = 0;
};

class KvStaging {
 public:
  virtual ~KvStaging() = default;

  // The cache's element type as KvLayout names it: "f32" (CPU), "bf16" (CUDA).
  virtual std::string_view kv_dtype() const = 0;
  virtual const KvTensorLayout& geometry() const = 0;
  // Tensor `t` of the cache when transports can use it in place (host memory); null when the
  // KV goes through staging buffers and the copies below.
  virtual char* host_tensor(int t) = 0;
  bool staged() { return host_tensor(kKeys) == nullptr; }
  // Tensor `t` of the cache when it is device memory that a device-memory transport (nccl) can
  // use in place; null for a host cache.
  virtual char* device_tensor(int t) { return nullptr; }
  // The CUDA device holding the cache; -1 for a host cache.
  virtual int cuda_device() const { return -1; }

  // A staging buffer of at least `bytes` bytes, contents undefined. Thread-safe.
  virtual absl::StatusOr<std::unique_ptr<HostBuffer>> AllocateHost(uint64_t bytes) = 0;
  // Host -> cache: runs `copies` from `host` and returns once the bytes are in the cache.
  // Thread-safe. The cache blocks must not be in use by a forward pass.
  virtual absl::Status CopyIn(std::span<const KvCopy> copies, const char* host) = 0;
  // Cache -> host, ordered after the work the forward pass has queued so far (call it from
  // ForwardHooks::on_layer_kv_written, for the layer just written). Returns at once; `then` runs
  // on the staging's own thread once the bytes are in `host`, or with the copy's error, in call
  // order. One caller thread at a time (the engine's).
  virtual void CopyOut(std::vector<KvCopy> copies, char* host,
                       std::function<void(absl::Status)> then) = 0;
  // CopyOut without copies: `then` runs on the staging's thread once the work the forward pass
  // has queued so far is done (the layer just written is in the cache), so that a device-memory
  // transport may read the cache itself. Same ordering and threading as CopyOut.
  void AfterWritten(std::function<void(absl::Status)> then) {
    CopyOut({}, nullptr, std::move(then));
  }
  // Blocks until every CopyOut so far has run its `then`.
  virtual void Drain() = 0;
};

// The staging for `runner`, built for `device`: in place on the CPU; pinned staging buffers on
// CUDA. The runner must outlive it.
absl::StatusOr<std::unique_ptr<KvStaging>> CreateKvStaging(ModelRunner& runner,
                                                           const DeviceSpec& device);

// In place over a host pool of its own (no runner): a DFlash drafter's context KV cache
// (engine/spec/dflash_drafter.h), which transports read and write where it is. `pool` must
// outlive it.
std::unique_ptr<KvStaging> CreateHostKvStaging(KvBlockPool& pool);

// Staged copies over a CPU runner's host pool, with memcpy (CopyOut's on a thread of its own):
// the staged paths of both workers without a GPU (tests). With `pool_as_device`, device_tensor()
// also hands out the pool, standing in for a GPU cache on the direct (nccl) paths of the workers
// (tests, with a host transport told to treat it as device memory). `pool` must outlive it.
std::unique_ptr<KvStaging> CreateHostCopyKvStaging(KvBlockPool& pool, bool pool_as_device = false);

// Recycles staging buffers: a lease's buffer freed now serves the next one of about its size
// instead of being page-locked anew (cudaHostAlloc takes milliseconds per hundred MiB). Keeps at
// most `max_cached_bytes` of free buffers. Thread-safe; buffers may outlive the cache.
class HostBufferCache {
 public:
  using AllocateFn = std::function<absl::StatusOr<void*>(uint64_t bytes)>;
  using FreeFn = std::function<void(void*)>;
  HostBufferCache(AllocateFn allocate, FreeFn free, uint64_t max_cached_bytes);
  ~HostBufferCache();
  HostBufferCache(const HostBufferCache&) = delete;
  HostBufferCache& operator=(const HostBufferCache&) = delete;

  absl::StatusOr<std::unique_ptr<HostBuffer>> Get(uint64_t bytes);
  // Free buffers held now, and their bytes (tests).
  int cached_buffers() const;
  uint64_t cached_bytes() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace dq::worker
