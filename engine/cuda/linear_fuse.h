// Joins matrices that read the same input (q|k|v, gate|up) into one [sum(out), in] matrix, so
// the device runs one launch over them: at decode sizes a single kernel per small matrix cannot
// keep the memory system busy (see ../shared/ANCHORS.md), one over the concatenation can.
#pragma once

#include <span>

#include "common/status.h"
#include "engine/model/linear_weight.h"

namespace dq::cuda {

// The row-wise concatenation of `parts` (in order), owning its bytes. Works when every part has
// the same storage (dtype, or scheme + group size + compute mode + activation scale) and every
// quantized component is either per-row ([out, ...]) or a per-tensor value equal in all parts
// (e.g. NVFP4's global scale when q/k/v share it). Otherwise FailedPrecondition saying why; the
// caller then keeps the matrices separate.
absl::StatusOr<LinearWeight> ConcatRows(std::span<const LinearWeight* const> parts);

}  // namespace dq::cuda
