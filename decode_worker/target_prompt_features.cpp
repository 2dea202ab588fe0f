#include "decode_worker/target_prompt_features.h"

#include "absl/strings/str_cat.h"
#include "engine/spec/hidden_capture.h"

namespace dq::decode {

absl::Status ObservePromptOnTarget(ModelRunner& runner, Drafter& drafter, uint64_t sequence,
                                   std::span<const int32_t> prompt) {
  const int n = static_cast<int>(prompt.size());
  if (n == 0) return absl::InvalidArgumentError("the prompt is empty");
  const ModelConfig& c = runner.config();
  KvCacheOptions kv = runner.kv_pool().options();
  kv.num_blocks = (n + kv.block_size - 1) / kv.block_size;
  kv.host_storage = true;
  KvBlockPool scratch(kv);
  KvSequence seq;
  scratch.extend(seq, n);
  HiddenCapture capture(drafter.target_layers(), c.num_layers, c.hidden_size);
  BatchLogits logits;
  const absl::Status forward = runner.forward_model(Phase::kPrefill)
                                   .Forward(Batch{Phase::kPrefill, {{&seq, prompt, false}}},
                                            scratch, runner.threads(), &logits, capture.Hooks());
  if (!forward.ok()) {
    return absl::Status(forward.code(),
                        absl::StrCat("recomputing the prompt's hidden states for the drafter: ",
                                     forward.message()));
  }
  DQ_RETURN_IF_ERROR(drafter.Begin(sequence, prompt));
  drafter.ObserveTarget(sequence, 0, n, capture.Rows(0, n));
  return absl::OkStatus();
}

}  // namespace dq::decode
