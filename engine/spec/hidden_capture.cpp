#include "engine/spec/hidden_capture.h"

#include <algorithm>

namespace dq {

HiddenCapture::HiddenCapture(std::span<const int> layers, int num_layers, int hidden)
    : hidden_(hidden), width_(static_cast<int64_t>(layers.size()) * hidden) {
  slots_.resize(std::max(num_layers, 0));
  for (size_t j = 0; j < layers.size(); ++j) {
    if (layers[j] >= 0 && layers[j] < num_layers) slots_[layers[j]].push_back(static_cast<int>(j));
  }
}

ForwardHooks HiddenCapture::Hooks() {
  ForwardHooks hooks;
  if (active()) {
    for (int l = 0; l < static_cast<int>(slots_.size()); ++l) {
      if (!slots_[l].empty()) hooks.tap_layers.push_back(l);
    }
    hooks.on_layer_output = [this](int layer, std::span<const float> h) { OnLayer(layer, h); };
  }
  return hooks;
}

void HiddenCapture::OnLayer(int layer, std::span<const float> hidden) {
  if (layer < 0 || layer >= static_cast<int>(slots_.size()) || slots_[layer].empty()) return;
  const int64_t tokens = static_cast<int64_t>(hidden.size()) / hidden_;
  rows_.resize(tokens * width_);
  for (int slot : slots_[layer]) {
    for (int64_t t = 0; t < tokens; ++t) {
      std::copy_n(hidden.data() + t * hidden_, hidden_, rows_.data() + t * width_ + slot * hidden_);
    }
  }
}

std::span<const float> HiddenCapture::Rows(int64_t first, int64_t count) const {
  if (first < 0 || count < 0 || (first + count) * width_ > static_cast<int64_t>(rows_.size())) {
    return {};
  }
  return std::span<const float>(rows_).subspan(first * width_, count * width_);
}

}  // namespace dq
