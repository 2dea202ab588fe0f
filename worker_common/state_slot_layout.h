// The manifest's view of a hybrid model's fixed per-sequence state (StatePart kind
// STATE_PART_KIND_STATE_SLOT): which layers the slot holds, the bytes of each, the dtype.
// Declared from the model program (its Gated DeltaNet blocks, in program order, through
// SequenceStateSpec: which layers they are and how many floats each keeps), once, for both
// workers.
#pragma once

#include <optional>
#include <string>

#include "common/status.h"
#include "dqserve/v1/worker.pb.h"
#include "engine/model/model_program.h"

namespace dq::worker {

// The layout of the slot that `state` (a program's sequence state) declares, for a model of
// `architecture`; nullopt for a program without recurrent state. FailedPrecondition when the
// program's recurrent layers keep states of different sizes (the manifest says where layer i
// starts only as i * layer_bytes, so it cannot describe such a program yet).
absl::StatusOr<std::optional<dqserve::v1::StateSlotLayout>> StateSlotLayoutFor(
    const std::string& architecture, const SequenceStateSpec& state);

}  // namespace dq::worker
