// The CPU executor of a persistent decode schedule (engine/model/decode_schedule.h): one thread
// per schedule worker walks its task queue, waiting on counters in shared memory as the CUDA
// persistent kernel's CTAs wait on counters in global memory. Each task computes its tiles with
// the CPU reference's arithmetic (cpu::LinearRowDot, cpu::AttentionHead, RmsNorm recomputed per
// task), so a step equals DecoderModel's decode step bit for bit at batch 1 and 2 (beyond, the
// reference's multi-row dot of quantized weights sums in another order). It is the reference the
// device interpreter is tested against and the proof that the schedule's counters order every
// read after its write.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/kvcache/kv_block_pool.h"
#include "engine/model/decode_schedule.h"
#include "engine/model/model_config.h"
#include "engine/model/model_program.h"

namespace dq::cpu {

// A sequence's new tokens in the step: one in a decode step; in a verification pass the last
// accepted token and the drafted ones, each row attending to the rows before it.
struct DecodeStepItem {
  KvSequence* seq = nullptr;  // has blocks for positions [num_tokens, num_tokens + tokens.size())
  std::span<const int32_t> tokens;
};

// Runs one step of `items` (schedule.options.rows tokens in all) through `schedule`: writes each
// token's K/V into `pool`, advances seq->num_tokens, and sets `logits` to [rows, vocab] in item
// order (every row's logits, as verification needs them). Weight-only programs only
// (FailedPrecondition otherwise); InvalidArgument for a row count that is not the schedule's, a
// token outside the vocabulary, or a sequence without blocks for its new tokens.
absl::Status RunDecodeSchedule(const DecodeSchedule& schedule, const ModelProgram& program,
                               const ModelConfig& config, std::span<const DecodeStepItem> items,
                               KvBlockPool& pool, std::vector<float>* logits);

}  // namespace dq::cpu
