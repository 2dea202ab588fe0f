// The file a streamed model reads its layers' device images from (weight_stream.h): written
// once at start-up, then read at page-aligned offsets with pread (optionally O_DIRECT) into
// pinned staging. Removed when closed: it is derived from the checkpoint, not a second copy of
// record.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace dq::cuda {

class WeightImageFile {
 public:
  // Creates (or truncates) `path`. With `direct_io`, reads bypass the page cache (O_DIRECT);
  // offsets, sizes and destinations must then be multiples of 4096 bytes.
  static absl::StatusOr<std::unique_ptr<WeightImageFile>> Create(const std::string& path,
                                                                 bool direct_io);
  ~WeightImageFile();
  WeightImageFile(const WeightImageFile&) = delete;
  WeightImageFile& operator=(const WeightImageFile&) = delete;

  // Appends `bytes` at the end of the file; `*offset` is where they start.
  absl::Status Append(const uint8_t* data, int64_t bytes, int64_t* offset);
  // Flushes the written image to the disk and opens it for reading.
  absl::Status FinishWriting();
  // Exactly `bytes` from `offset` into `dst`, or an error naming the file and the range (a
  // short read means the file was truncated or replaced after start-up).
  absl::Status ReadAt(int64_t offset, uint8_t* dst, int64_t bytes) const;
  // Evicts the file from the page cache, so the next reads come from the disk (cold-cache runs).
  absl::Status DropPageCache() const;

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }

 private:
  WeightImageFile(std::string path, bool direct_io) : path_(std::move(path)), direct_(direct_io) {}
  std::string path_;
  bool direct_ = false;
  int write_fd_ = -1;
  int read_fd_ = -1;
  int64_t size_ = 0;
};

}  // namespace dq::cuda
