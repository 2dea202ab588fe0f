// The target's hidden states of a prompt, recomputed on the decode worker for a drafter
// conditioned on them (DFlash, docs/speculative.md "Disaggregation") when the prefill worker
// shipped no drafter context: a prefill worker without that drafter, another drafter, a failed
// drafter transfer. The target's prefill pass runs over the prompt into a scratch KV pool of its
// own, so the lease's blocks (the prompt KV the prefill worker shipped, which decoding uses)
// stay untouched; the drafter's layers are captured and handed to the drafter.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "engine/model/model_runner.h"
#include "engine/spec/drafter.h"

namespace dq::decode {

// Begins `sequence` on `drafter` and observes the prompt's target_layers() rows, computed by
// `runner`'s prefill model (which must expose hidden states: the CPU backend). Engine thread
// only (it uses the runner's threads). Errors: the forward pass's (the sequence is then not
// begun).
absl::Status ObservePromptOnTarget(ModelRunner& runner, Drafter& drafter, uint64_t sequence,
                                   std::span<const int32_t> prompt);

}  // namespace dq::decode
