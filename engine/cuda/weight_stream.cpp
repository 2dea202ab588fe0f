#include "engine/cuda/weight_stream.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_check.h"

namespace dq::cuda {

absl::StatusOr<std::unique_ptr<WeightStreamer>> WeightStreamer::Create(
    const WeightStreamOptions& o) {
  if (o.slots < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight streaming needs at least 2 device slots (got ", o.slots,
                     "): one layer computes while the next is copied"));
  }
  if (o.chunk_bytes <= 0 || o.chunk_bytes % kImagePageBytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat("weight streaming chunk_bytes (", o.chunk_bytes,
                                                   ") must be a positive multiple of 4096"));
  }
  std::unique_ptr<WeightStreamer> s(new WeightStreamer(o));
  if (o.source == WeightSource::kFile) {
    if (o.image_path.empty()) {
      return absl::InvalidArgumentError("weight streaming from a file needs an image path");
    }
    DQ_ASSIGN_OR_RETURN(s->file_, WeightImageFile::Create(o.image_path, o.direct_io));
    s->readers_ = std::make_unique<ThreadPool>(std::max(1, o.read_threads));
  }
  return s;
}

WeightStreamer::~WeightStreamer() {
  if (copy_) cudaStreamSynchronize(copy_);
  for (uint8_t* p : host_images_) cudaFreeHost(p);
  for (uint8_t* p : staging_) {
    if (p) cudaFreeHost(p);
  }
  for (cudaEvent_t e : staged_) {
    if (e) cudaEventDestroy(e);
  }
  for (cudaEvent_t e : filled_) cudaEventDestroy(e);
  for (cudaEvent_t e : freed_) cudaEventDestroy(e);
  if (copy_) cudaStreamDestroy(copy_);
}

absl::Status WeightStreamer::AddLayer(const CudaDecoderModel::Layer& resident) {
  LayerImageLayout layout = DescribeLayerImage(resident);
  uint8_t* image = nullptr;
  std::vector<uint8_t> temp;
  if (options_.source == WeightSource::kPinnedHost) {
    if (cudaMallocHost(&image, static_cast<size_t>(layout.bytes)) != cudaSuccess) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot pin ", layout.bytes, " bytes of host memory for layer ", layouts_.size(),
          "'s streamed weights; stream from the image file instead (source = \"disk\")"));
    }
    host_images_.push_back(image);
  } else {
    temp.resize(static_cast<size_t>(layout.bytes));
    image = temp.data();
  }
  DownloadLayerImage(resident, layout, image);
  if (file_) {
    int64_t offset = 0;
    DQ_RETURN_IF_ERROR(file_->Append(image, layout.bytes, &offset));
    file_offsets_.push_back(offset);
  }
  shapes_.push_back(ViewLayerImage(resident, layout, 0));
  slot_bytes_ = std::max(slot_bytes_, layout.bytes);
  image_bytes_ += layout.bytes;
  layouts_.push_back(std::move(layout));
  return absl::OkStatus();
}

absl::Status WeightStreamer::Finish() {
  if (file_) DQ_RETURN_IF_ERROR(file_->FinishWriting());
  const int n = options_.slots;
  CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  for (int s = 0; s < n; ++s) {
    slot_memory_.emplace_back(static_cast<size_t>(slot_bytes_));
    cudaEvent_t f, r;
    CUDA_CHECK(cudaEventCreateWithFlags(&f, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&r, cudaEventDisableTiming));
    filled_.push_back(f);
    freed_.push_back(r);
  }
  for (int l = 0; l < num_layers(); ++l) {
    for (int s = 0; s < n; ++s) {
      views_.push_back(ViewLayerImage(shapes_[l], layouts_[l],
                                      reinterpret_cast<uintptr_t>(slot_memory_[s].get())));
    }
  }
  if (file_) {
    for (int k = 0; k < 2; ++k) {
      CUDA_CHECK(cudaMallocHost(&staging_[k], static_cast<size_t>(slot_bytes_)));
      CUDA_CHECK(cudaEventCreateWithFlags(&staged_[k], cudaEventDisableTiming));
    }
  }
  return absl::OkStatus();
}

absl::Status WeightStreamer::ReadLayer(int layer, uint8_t* out) {
  const int64_t bytes = layouts_[layer].bytes;
  const int64_t chunk = options_.chunk_bytes;
  std::mutex mu;
  absl::Status first_error;
  readers_->ParallelFor((bytes + chunk - 1) / chunk, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t off = c * chunk;
      absl::Status s =
          file_->ReadAt(file_offsets_[layer] + off, out + off, std::min(chunk, bytes - off));
      if (!s.ok()) {
        std::lock_guard lock(mu);
        if (first_error.ok()) first_error = std::move(s);
        return;
      }
    }
  });
  if (first_error.ok()) return first_error;
  return absl::Status(
      first_error.code(),
      absl::StrCat("streaming layer ", layer, " of the prefill weights: ", first_error.message()));
}

absl::Status WeightStreamer::Load(int layer, int slot) {
  uint8_t* dst = slot_memory_[slot].get<uint8_t>();
  const int64_t bytes = layouts_[layer].bytes;
  // The slot's previous layer must be done computing before its bytes are overwritten.
  CUDA_CHECK(cudaStreamWaitEvent(copy_, freed_[slot]));
  if (!file_) {
    CUDA_CHECK(cudaMemcpyAsync(dst, host_images_[layer], bytes, cudaMemcpyHostToDevice, copy_));
  } else {
    const int k = next_staging_;
    next_staging_ ^= 1;
    // The staging buffer's last copies (two loads ago) must be done before it is refilled.
    CUDA_CHECK(cudaEventSynchronize(staged_[k]));
    if (options_.fault_for_testing) DQ_RETURN_IF_ERROR(options_.fault_for_testing(layer));
    for (int64_t off = 0; off < bytes; off += options_.chunk_bytes) {
      const int64_t n = std::min(options_.chunk_bytes, bytes - off);
      absl::Status read = file_->ReadAt(file_offsets_[layer] + off, staging_[k] + off, n);
      if (!read.ok()) {
        return absl::Status(read.code(), absl::StrCat("streaming layer ", layer,
                                                      " of the prefill "
                                                      "weights: ",
                                                      read.message()));
      }
      // Per chunk, so the copy of one chunk overlaps the read of the next.
      CUDA_CHECK(cudaMemcpyAsync(dst + off, staging_[k] + off, n, cudaMemcpyHostToDevice, copy_));
    }
    CUDA_CHECK(cudaEventRecord(staged_[k], copy_));
  }
  CUDA_CHECK(cudaEventRecord(filled_[slot], copy_));
  return absl::OkStatus();
}

absl::Status WeightStreamer::Begin(cudaStream_t compute) {
  compute_ = compute;
  next_load_ = 0;
  return LoadUpTo(-1);  // nothing enqueued yet
}

absl::Status WeightStreamer::LoadUpTo(int layer) {
  // Pinned host: the copies run by themselves, so every free slot is queued at once. File: each
  // read blocks this thread, which must enqueue the next layer's kernels before reading further,
  // so it reads one layer ahead (the other slots add nothing there).
  const int last = file_ ? layer + 1 : layer + options_.slots;
  while (next_load_ <= std::min(last, num_layers() - 1)) {
    DQ_RETURN_IF_ERROR(Load(next_load_, next_load_ % options_.slots));
    ++next_load_;
  }
  return absl::OkStatus();
}

const CudaDecoderModel::Layer& WeightStreamer::Acquire(int layer) {
  const int slot = layer % options_.slots;
  CUDA_CHECK(cudaStreamWaitEvent(compute_, filled_[slot]));
  return views_[static_cast<size_t>(layer) * options_.slots + slot];
}

absl::Status WeightStreamer::Release(int layer) {
  CUDA_CHECK(cudaEventRecord(freed_[layer % options_.slots], compute_));
  return LoadUpTo(layer);
}

void WeightStreamer::Abort() {
  CUDA_CHECK(cudaStreamSynchronize(copy_));
  if (compute_) CUDA_CHECK(cudaStreamSynchronize(compute_));
}

absl::Status WeightStreamer::DropPageCache() const {
  return file_ ? file_->DropPageCache() : absl::OkStatus();
}

}  // namespace dq::cuda
