// Owning device memory: one cudaMalloc, freed on destruction. Move-only.
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
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Free();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Free(); }

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
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace dq::cuda
