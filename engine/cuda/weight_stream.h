// Weight streaming for a prefill model whose layers are not resident (offloaded disaggregated
// prefill, docs/odp.md): each layer's device image (layer_image.h: the exact bytes the resident
// upload would hold) goes source -> pinned host staging -> one of N device slots on a copy
// stream while earlier layers compute. Ordering is by CUDA events only: a slot's "filled" event
// gates the compute that reads it, its "freed" event (recorded after that compute) gates the
// copy that refills it. Slots, staging and events are allocated once.
//
// Sources: an image file written at start-up and read with pread (optionally O_DIRECT) in
// page-aligned chunks, by a few threads at once, into two layer-sized pinned staging buffers (so
// reading layer j never waits on the compute that frees j's slot), or the whole image in pinned
// host memory (no host reads at all; the copies run ahead by themselves).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/thread_pool.h"
#include "engine/cuda/cuda_model_internal.h"
#include "engine/cuda/layer_image.h"
#include "engine/cuda/weight_image_file.h"

namespace dq::cuda {

enum class WeightSource { kFile, kPinnedHost };

struct WeightStreamOptions {
  int slots = 2;  // device slots, >= 2 (one computing, one filling)
  WeightSource source = WeightSource::kFile;
  // kFile: where the image is written at start-up (removed at exit). Its disk is what a cold
  // pass reads from.
  std::string image_path;
  bool direct_io = false;                  // kFile: O_DIRECT reads
  int64_t chunk_bytes = int64_t{8} << 20;  // kFile: one pread (a multiple of 4096)
  // kFile: threads reading one layer's chunks at once (one thread stays far below both a page
  // cache copy's and an NVMe drive's bandwidth).
  int read_threads = 4;
  // Tests: called before layer `layer` is read from the file; an error fails the pass exactly
  // as a failed read would.
  std::function<absl::Status(int layer)> fault_for_testing;
};

class WeightStreamer {
 public:
  static absl::StatusOr<std::unique_ptr<WeightStreamer>> Create(const WeightStreamOptions& o);
  ~WeightStreamer();
  WeightStreamer(const WeightStreamer&) = delete;
  WeightStreamer& operator=(const WeightStreamer&) = delete;

  // Start-up, once per layer in order: stores `resident`'s image in the source (the caller
  // frees the resident layer afterwards). Then Finish allocates the slots and staging.
  absl::Status AddLayer(const CudaDecoderModel::Layer& resident);
  absl::Status Finish();

  // One pass over the layers, on the model's `compute` stream: Begin starts filling the slots;
  // for each layer l in order, Acquire(l) makes `compute` wait for its slot and returns its
  // weights, the caller enqueues the layer, then Release(l) frees the slot and loads further
  // layers (layer j always goes to slot j % slots, behind the event that freed it). A failed
  // Begin/Release (a read error) ends the pass: call Abort, which waits until no copy or kernel
  // of the pass is in flight; the next Begin starts afresh.
  absl::Status Begin(cudaStream_t compute);
  const CudaDecoderModel::Layer& Acquire(int layer);
  absl::Status Release(int layer);
  void Abort();

  // kFile: evicts the image from the page cache (the next pass reads the disk); kPinnedHost: OK.
  absl::Status DropPageCache() const;

  int num_layers() const { return static_cast<int>(layouts_.size()); }
  int slots() const { return options_.slots; }
  int64_t slot_bytes() const { return slot_bytes_; }
  // Bytes one pass copies to the device (the sum of the layer images).
  int64_t image_bytes() const { return image_bytes_; }
  const WeightStreamOptions& options() const { return options_; }

 private:
  explicit WeightStreamer(const WeightStreamOptions& o) : options_(o) {}
  absl::Status Load(int layer, int slot);
  // Loads layers from next_load_ on, as far ahead of `layer` (the last one enqueued; -1 for
  // none) as the source allows.
  absl::Status LoadUpTo(int layer);
  // kFile: layer `layer`'s image into `out` (pinned), its chunks read in parallel.
  absl::Status ReadLayer(int layer, uint8_t* out);

  WeightStreamOptions options_;
  std::vector<LayerImageLayout> layouts_;
  std::vector<CudaDecoderModel::Layer> shapes_;  // views at base 0 (see ViewLayerImage)
  std::vector<int64_t> file_offsets_;            // kFile
  std::vector<uint8_t*> host_images_;            // kPinnedHost, one pinned buffer per layer
  std::unique_ptr<WeightImageFile> file_;
  std::unique_ptr<ThreadPool> readers_;  // kFile
  int64_t slot_bytes_ = 0, image_bytes_ = 0;

  std::vector<DeviceBuffer> slot_memory_;
  std::vector<CudaDecoderModel::Layer> views_;  // [layer * slots + slot]
  std::vector<cudaEvent_t> filled_, freed_;     // per slot
  uint8_t* staging_[2] = {nullptr, nullptr};    // kFile, pinned, slot_bytes_ each
  cudaEvent_t staged_[2] = {nullptr, nullptr};  // the copies out of each staging buffer
  int next_staging_ = 0;
  int next_load_ = 0;  // the next layer of this pass to load
  cudaStream_t copy_ = nullptr;
  cudaStream_t compute_ = nullptr;
};

}  // namespace dq::cuda
