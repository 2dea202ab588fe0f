// Where a persistent decode step's time goes (dq-bench-gpu --persistent-trace): the per-task
// times CudaDecoderModel records, summed up per task kind.
#pragma once

#include <vector>

#include "engine/cuda/cuda_model.h"
#include "nlohmann/json.hpp"

namespace dq::bench {

// Per kind (qkv, rope_kv, attention, o, gate_up, down, lm_head): its stages' share of the step
// (from the stage before filling its counter to this one filling it), how long its tasks ran
// once ready, how long a ready stage took to be noticed, and how long tasks waited for their
// worker. Prints a table to stderr and returns the same as JSON.
nlohmann::json SummarizePersistentTrace(
    const std::vector<cuda::CudaDecoderModel::PersistentTaskTime>& tasks);

}  // namespace dq::bench
