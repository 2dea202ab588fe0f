// A read-only memory mapping of a whole file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "common/status.h"

namespace dq {

// Maps a regular, non-empty file read-only (MAP_PRIVATE). The mapping lives as long as the
// object; pointers into data() must not outlive it.
class MappedFile {
 public:
  // Errors: NotFound if `path` does not exist; InvalidArgument if it is a directory, not a
  // regular file, or empty; Internal/PermissionDenied for open/mmap failures.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace dq
