// A decoder layer's device weights as one contiguous byte image: every buffer the resident upload
// made (norms, matrices, scales, repacked weight-only codes), each at an aligned offset. Streaming
// copies these exact bytes into a device slot and runs the layer through views into the slot, so
// a streamed layer computes exactly what the resident one does.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cuda/cuda_model_internal.h"

namespace dq::cuda {

// Offsets of buffers inside an image: enough for every kernel's vector loads (cudaMalloc's own
// alignment), and image sizes are whole pages so O_DIRECT reads of an image file line up.
inline constexpr int64_t kImageBufferAlign = 256;
inline constexpr int64_t kImagePageBytes = 4096;

struct LayerImageLayout {
  std::vector<int64_t> offsets;  // per buffer, in ForEachLayerBuffer's order
  std::vector<int64_t> sizes;
  int64_t bytes = 0;  // the whole image, a multiple of kImagePageBytes
};

// Where each of `layer`'s buffers goes in its image.
LayerImageLayout DescribeLayerImage(const CudaDecoderModel::Layer& layer);

// Copies `layer`'s device buffers into `host` (layout.bytes, zero padding between). Synchronous.
void DownloadLayerImage(const CudaDecoderModel::Layer& layer, const LayerImageLayout& layout,
                        uint8_t* host);

// A layer shaped like `shape` (formats, sizes, scalar scales) whose buffers are views of the
// image at device address `base`. `shape` must be the layer `layout` was described from, or a
// view of it: only its sizes and scalars are read. With base 0 the result is such a shape (its
// addresses are image offsets, never dereferenced), kept after the resident layer is freed.
CudaDecoderModel::Layer ViewLayerImage(const CudaDecoderModel::Layer& shape,
                                       const LayerImageLayout& layout, uintptr_t base);

// `src`'s scalars with views of its buffers (at their own addresses): another model's lm_head
// used in place.
DeviceLinear ViewLinear(const DeviceLinear& src);

}  // namespace dq::cuda
