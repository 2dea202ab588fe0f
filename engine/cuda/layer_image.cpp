#include "engine/cuda/layer_image.h"

#include <cstring>
#include <functional>

#include "engine/cuda/cuda_check.h"

namespace dq::cuda {
namespace {

// The fields ViewLinear copies. If DeviceLinear or WeightOnlyWeights gain a field, these sizes
// stop matching and the build fails here, so a view can never silently drop it.
struct WeightOnlyFields {
  WeightOnlyFormat format;
  int bits;
  int group_size;
  DType gguf_type;
  int64_t out_features;
  int64_t in_features;
  float global_scale;
  DeviceBuffer packed, scales, aux;
};
struct LinearFields {
  LinearKind kind;
  int64_t out_features, in_features;
  DeviceBuffer weight, weight_scale;
  float weight_global_scale, act_global_scale;
  WeightOnlyWeights weight_only;
};
static_assert(sizeof(WeightOnlyFields) == sizeof(WeightOnlyWeights),
              "WeightOnlyWeights changed: update ViewLinear (layer_image.cpp)");
static_assert(sizeof(LinearFields) == sizeof(DeviceLinear),
              "DeviceLinear changed: update ViewLinear (layer_image.cpp)");

// Every device buffer of a layer, in the image's order.
template <typename LayerT, typename Fn>
void ForEachLayerBuffer(LayerT& l, Fn&& fn) {
  fn(l.attn_norm);
  fn(l.ffn_norm);
  fn(l.q_norm);
  fn(l.k_norm);
  auto linear = [&](auto& d) {
    fn(d.weight);
    fn(d.weight_scale);
    fn(d.weight_only.packed);
    fn(d.weight_only.scales);
    fn(d.weight_only.aux);
  };
  for (auto& d : l.qkv) linear(d);
  for (auto& d : l.gate_up) linear(d);
  linear(l.o);
  linear(l.down);
}

int64_t RoundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// A DeviceLinear with `src`'s scalars and buffers from `next` (called once per buffer, in
// ForEachLayerBuffer's order).
DeviceLinear CopyLinear(const DeviceLinear& src,
                        const std::function<DeviceBuffer(const DeviceBuffer&)>& next) {
  DeviceLinear d;
  d.kind = src.kind;
  d.out_features = src.out_features;
  d.in_features = src.in_features;
  d.weight = next(src.weight);
  d.weight_scale = next(src.weight_scale);
  d.weight_global_scale = src.weight_global_scale;
  d.act_global_scale = src.act_global_scale;
  const WeightOnlyWeights& s = src.weight_only;
  WeightOnlyWeights& w = d.weight_only;
  w.format = s.format;
  w.bits = s.bits;
  w.group_size = s.group_size;
  w.gguf_type = s.gguf_type;
  w.out_features = s.out_features;
  w.in_features = s.in_features;
  w.global_scale = s.global_scale;
  w.packed = next(s.packed);
  w.scales = next(s.scales);
  w.aux = next(s.aux);
  return d;
}

}  // namespace

LayerImageLayout DescribeLayerImage(const CudaDecoderModel::Layer& layer) {
  LayerImageLayout out;
  int64_t at = 0;
  ForEachLayerBuffer(layer, [&](const DeviceBuffer& b) {
    at = RoundUp(at, kImageBufferAlign);
    out.offsets.push_back(at);
    out.sizes.push_back(static_cast<int64_t>(b.bytes()));
    at += static_cast<int64_t>(b.bytes());
  });
  out.bytes = RoundUp(std::max<int64_t>(at, 1), kImagePageBytes);
  return out;
}

void DownloadLayerImage(const CudaDecoderModel::Layer& layer, const LayerImageLayout& layout,
                        uint8_t* host) {
  std::memset(host, 0, static_cast<size_t>(layout.bytes));
  size_t i = 0;
  ForEachLayerBuffer(layer, [&](const DeviceBuffer& b) {
    if (b.bytes() > 0) {
      CUDA_CHECK(cudaMemcpy(host + layout.offsets[i], b.get(), b.bytes(), cudaMemcpyDeviceToHost));
    }
    ++i;
  });
}

CudaDecoderModel::Layer ViewLayerImage(const CudaDecoderModel::Layer& shape,
                                       const LayerImageLayout& layout, uintptr_t base) {
  size_t i = 0;
  auto next = [&](const DeviceBuffer& b) {
    const size_t k = i++;
    if (b.bytes() == 0) return DeviceBuffer();
    return DeviceBuffer::View(
        reinterpret_cast<void*>(base + static_cast<uintptr_t>(layout.offsets[k])), b.bytes());
  };
  CudaDecoderModel::Layer v;
  v.attn_norm = next(shape.attn_norm);
  v.ffn_norm = next(shape.ffn_norm);
  v.q_norm = next(shape.q_norm);
  v.k_norm = next(shape.k_norm);
  for (const DeviceLinear& d : shape.qkv) v.qkv.push_back(CopyLinear(d, next));
  for (const DeviceLinear& d : shape.gate_up) v.gate_up.push_back(CopyLinear(d, next));
  v.o = CopyLinear(shape.o, next);
  v.down = CopyLinear(shape.down, next);
  return v;
}

DeviceLinear ViewLinear(const DeviceLinear& src) {
  return CopyLinear(src, [](const DeviceBuffer& b) {
    return b.bytes() == 0 ? DeviceBuffer() : DeviceBuffer::View(b.get(), b.bytes());
  });
}

}  // namespace dq::cuda
