// Copies chosen layers' outputs out of a target forward pass (ForwardHooks::on_layer_output) into
// one row per token: the layers' hidden states concatenated in the order asked for, the features
// a DFlash drafter reads. Nothing is copied for layers not asked for.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/model/forward_model.h"

namespace dq {

class HiddenCapture {
 public:
  // `layers`: target layer indices (may repeat); `hidden`: the target's hidden size.
  HiddenCapture(std::span<const int> layers, int num_layers, int hidden);

  bool active() const { return width_ > 0; }
  int64_t width() const { return width_; }
  // Hooks that fill this capture during a forward pass (each pass overwrites the last).
  ForwardHooks Hooks();
  // Rows of the last pass's tokens [first, first + count), in batch order.
  std::span<const float> Rows(int64_t first, int64_t count) const;

 private:
  void OnLayer(int layer, std::span<const float> hidden);

  int hidden_;
  int64_t width_;
  std::vector<std::vector<int>> slots_;  // per target layer: where its copies go
  std::vector<float> rows_;
};

}  // namespace dq
