// The manifest's view of a hybrid model's fixed per-sequence state (StatePart kind
// STATE_PART_KIND_STATE_SLOT): which layers the slot holds, the bytes of each, the dtype.
// Declared from the model program (its Gated DeltaNet blocks size the pool's state slots through
// SequenceStateSpec; the config says which layers they are), once, for both workers.
#pragma once

#include <optional>

#include "common/status.h"
#include "dqserve/v1/worker.pb.h"
#include "engine/model/model_config.h"

namespace dq::worker {

// The layout of a slot of `slot_floats` fp32 values (the runner's pool state slots) for
// `config`'s recurrent layers; nullopt for a model without recurrent state (slot_floats 0).
// FailedPrecondition when the slot does not split into equal per-layer parts, one per linear
// layer of the config (a program this manifest cannot describe).
absl::StatusOr<std::optional<dqserve::v1::StateSlotLayout>> StateSlotLayoutFor(
    const ModelConfig& config, int64_t slot_floats);

}  // namespace dq::worker
