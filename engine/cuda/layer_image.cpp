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
// The same for the blocks: a new buffer must join ForEachLayerBuffer and ViewLayerImage.
struct AttentionFields {
  DeviceBuffer norm, q_norm, k_norm;
  std::vector<DeviceLinear> qkv;
  DeviceLinear o;
  int kv_layer;
};
struct MlpFields {
  DeviceBuffer norm;
  std::vector<DeviceLinear> gate_up;
  DeviceLinear down;
};
static_assert(sizeof(AttentionFields) == sizeof(DeviceAttention),
              "DeviceAttention changed: update ForEachLayerBuffer and ViewLayerImage");
static_assert(sizeof(MlpFields) == sizeof(DeviceMlp),
              "DeviceMlp changed: update ForEachLayerBuffer and ViewLayerImage");

// Every device buffer of a layer, in the image's order.
template <typename LayerT, typename Fn>
void ForEachLayerBuffer(LayerT& l, Fn&& fn) {
  auto linear = [&](auto& d) {
    fn(d.weight);
    fn(d.weight_scale);
    fn(d.weight_only.packed);
    fn(d.weight_only.scales);
    fn(d.weight_only.aux);
  };
  for (auto& block : l.blocks) {
    if (auto* a = std::get_if<DeviceAttention>(&block)) {
      fn(a->norm);
      fn(a->q_norm);
      fn(a->k_norm);
      for (auto& d : a->qkv) linear(d);
      linear(a->o);
    } else {
      auto& m = std::get<DeviceMlp>(block);
      fn(m.norm);
      for (auto& d : m.gate_up) linear(d);
      linear(m.down);
    }
  }
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
  // In ForEachLayerBuffer's order.
  CudaDecoderModel::Layer v;
  for (const DeviceBlock& block : shape.blocks) {
    if (const auto* a = std::get_if<DeviceAttention>(&block)) {
      DeviceAttention d;
      d.norm = next(a->norm);
      d.q_norm = next(a->q_norm);
      d.k_norm = next(a->k_norm);
      for (const DeviceLinear& x : a->qkv) d.qkv.push_back(CopyLinear(x, next));
      d.o = CopyLinear(a->o, next);
      d.kv_layer = a->kv_layer;
      v.blocks.emplace_back(std::move(d));
    } else {
      const DeviceMlp& m = std::get<DeviceMlp>(block);
      DeviceMlp d;
      d.norm = next(m.norm);
      for (const DeviceLinear& x : m.gate_up) d.gate_up.push_back(CopyLinear(x, next));
      d.down = CopyLinear(m.down, next);
      v.blocks.emplace_back(std::move(d));
    }
  }
  return v;
}

DeviceLinear ViewLinear(const DeviceLinear& src) {
  return CopyLinear(src, [](const DeviceBuffer& b) {
    return b.bytes() == 0 ? DeviceBuffer() : DeviceBuffer::View(b.get(), b.bytes());
  });
}

}  // namespace dq::cuda
