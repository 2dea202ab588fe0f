#include "engine/cuda/weight_image_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace dq::cuda {
namespace {

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<WeightImageFile>> WeightImageFile::Create(const std::string& path,
                                                                         bool direct_io) {
  std::unique_ptr<WeightImageFile> f(new WeightImageFile(path, direct_io));
  f->write_fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (f->write_fd_ < 0) {
    return Errno(
        "cannot create the streamed-weights image (set the image directory to a "
        "writable disk with room for the prefill layers)",
        path);
  }
  return f;
}

WeightImageFile::~WeightImageFile() {
  if (write_fd_ >= 0) ::close(write_fd_);
  if (read_fd_ >= 0) ::close(read_fd_);
  ::unlink(path_.c_str());
}

absl::Status WeightImageFile::Append(const uint8_t* data, int64_t bytes, int64_t* offset) {
  *offset = size_;
  for (int64_t done = 0; done < bytes;) {
    const ssize_t n = ::pwrite(write_fd_, data + done, static_cast<size_t>(bytes - done),
                               static_cast<off_t>(size_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno("writing the streamed-weights image", path_);
    done += n;
  }
  size_ += bytes;
  return absl::OkStatus();
}

absl::Status WeightImageFile::FinishWriting() {
  // Written pages are dirty until synced, and fadvise(DONTNEED) cannot evict dirty pages.
  if (::fdatasync(write_fd_) != 0) return Errno("syncing", path_);
  ::close(write_fd_);
  write_fd_ = -1;
  read_fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | (direct_ ? O_DIRECT : 0));
  if (read_fd_ < 0) {
    return Errno(
        direct_ ? "cannot open with O_DIRECT (the file system may not support it)" : "cannot open",
        path_);
  }
  return absl::OkStatus();
}

absl::Status WeightImageFile::ReadAt(int64_t offset, uint8_t* dst, int64_t bytes) const {
  for (int64_t done = 0; done < bytes;) {
    const ssize_t n = ::pread(read_fd_, dst + done, static_cast<size_t>(bytes - done),
                              static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return Errno(absl::StrCat("reading bytes [", offset + done, ", ", offset + bytes, ") of"),
                   path_);
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat("the streamed-weights image ", path_,
                                              " ends before byte ", offset + bytes,
                                              " (read stopped at ", offset + done,
                                              "): it was truncated or replaced after start-up; "
                                              "restart the server to rebuild it"));
    }
    done += n;
  }
  return absl::OkStatus();
}

absl::Status WeightImageFile::DropPageCache() const {
  const int fd = read_fd_ >= 0 ? read_fd_ : write_fd_;
  const int rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("posix_fadvise(DONTNEED) on ", path_, ": ", std::strerror(rc)));
  }
  return absl::OkStatus();
}

}  // namespace dq::cuda
