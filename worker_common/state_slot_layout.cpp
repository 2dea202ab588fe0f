#include "worker_common/state_slot_layout.h"

#include "absl/strings/str_cat.h"

namespace dq::worker {
namespace v1 = dqserve::v1;

absl::StatusOr<std::optional<v1::StateSlotLayout>> StateSlotLayoutFor(const ModelConfig& config,
                                                                      int64_t slot_floats) {
  if (slot_floats <= 0) return std::optional<v1::StateSlotLayout>();
  v1::StateSlotLayout l;
  l.set_architecture(config.architecture);
  for (int layer = 0; layer < config.num_layers; ++layer) {
    if (config.is_linear_layer(layer)) l.add_layers(static_cast<uint32_t>(layer));
  }
  // ModelProgram::Finalize lays the blocks' states out in program order, one after another; the
  // manifest says where layer i starts only as i * layer_bytes.
  if (l.layers_size() == 0 || slot_floats % l.layers_size() != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        config.architecture, "'s state slot (", slot_floats, " floats) does not split into ",
        l.layers_size(), " equal layer states; the workers cannot ship it"));
  }
  l.set_layer_bytes(static_cast<uint64_t>(slot_floats / l.layers_size()) * sizeof(float));
  l.set_dtype("f32");  // the CPU backend's state (the only one that runs recurrent layers)
  return std::optional<v1::StateSlotLayout>(std::move(l));
}

}  // namespace dq::worker
