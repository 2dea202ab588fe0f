#include "worker_common/state_slot_layout.h"

#include "absl/strings/str_cat.h"

namespace dq::worker {
namespace v1 = dqserve::v1;

absl::StatusOr<std::optional<v1::StateSlotLayout>> StateSlotLayoutFor(
    const std::string& architecture, const SequenceStateSpec& state) {
  if (!state.has_slot()) return std::optional<v1::StateSlotLayout>();
  const size_t n = state.recurrent_layer_ids.size();
  if (n == 0 || state.recurrent_layer_floats.size() != n) {
    return absl::InternalError(absl::StrCat(architecture, "'s program keeps a state slot of ",
                                            state.slot_floats,
                                            " floats but names no recurrent layers"));
  }
  v1::StateSlotLayout l;
  l.set_architecture(architecture);
  // ModelProgram::Finalize lays the blocks' states out in program order, one after another.
  for (size_t i = 0; i < n; ++i) {
    if (state.recurrent_layer_floats[i] != state.recurrent_layer_floats[0]) {
      return absl::FailedPreconditionError(
          absl::StrCat(architecture, "'s recurrent layers ", state.recurrent_layer_ids[0], " and ",
                       state.recurrent_layer_ids[i], " keep states of ",
                       state.recurrent_layer_floats[0], " and ", state.recurrent_layer_floats[i],
                       " floats; the workers ship only slots of equal layer states"));
    }
    l.add_layers(static_cast<uint32_t>(state.recurrent_layer_ids[i]));
  }
  l.set_layer_bytes(static_cast<uint64_t>(state.recurrent_layer_floats[0]) * sizeof(float));
  l.set_dtype("f32");  // the CPU backend's state (the only one that runs recurrent layers)
  return std::optional<v1::StateSlotLayout>(std::move(l));
}

}  // namespace dq::worker
