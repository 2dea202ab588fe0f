// Owning device memory: one cudaMalloc, freed on destruction. Move-only. View() wraps memory
// owned elsewhere (a slot of streamed weights, another model's buffer) and frees nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "engine/cuda/cuda_check.h"

namespace dq::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) CUDA_CHECK(cudaMalloc(&ptr_, bytes_));
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)),
        owned_(std::exchange(o.owned_, true)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Free();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      owned_ = std::exchange(o.owned_, true);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Free(); }

  // `bytes` at `ptr`, owned by someone else who keeps them alive longer than the view.
  static DeviceBuffer View(void* ptr, size_t bytes) {
    DeviceBuffer b;
    b.ptr_ = ptr;
    b.bytes_ = bytes;
    b.owned_ = false;
    return b;
  }

  // A buffer holding a copy of `host` (synchronous upload).
  template <typename T>
  static DeviceBuffer From(std::span<const T> host) {
    DeviceBuffer b(host.size_bytes());
    if (!host.empty()) {
      CUDA_CHECK(cudaMemcpy(b.ptr_, host.data(), host.size_bytes(), cudaMemcpyHostToDevice));
    }
    return b;
  }
  template <typename T>
  static DeviceBuffer From(const std::vector<T>& host) {
    return From(std::span<const T>(host));
  }
  // Copies the whole buffer back (synchronous), as elements of T.
  template <typename T>
  std::vector<T> ToHost() const {
    std::vector<T> out(bytes_ / sizeof(T));
    if (!out.empty()) {
      CUDA_CHECK(cudaMemcpy(out.data(), ptr_, out.size() * sizeof(T), cudaMemcpyDeviceToHost));
    }
    return out;
  }

  template <typename T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }
  bool empty() const { return bytes_ == 0; }

 private:
  void Free() {
    if (ptr_ != nullptr && owned_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    owned_ = true;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  bool owned_ = true;
};

}  // namespace dq::cuda
