#include "engine/spec/spec_config.h"

#include <algorithm>

#include "engine/spec/ngram_drafter.h"

namespace dq {

absl::Status Validate(const SpecConfig& config) {
  if (config.k < 1 || config.k > kMaxSpecK) {
    return absl::InvalidArgumentError(
        absl::StrCat("--spec-k must be in [1, ", kMaxSpecK, "], got ", config.k));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Drafter>> CreateDrafter(std::string_view name,
                                                       const ModelConfig& target) {
  std::unique_ptr<Drafter> drafter;
  if (name == "ngram") {
    drafter = std::make_unique<NgramDrafter>();
  } else if (name == "self") {
    // It computes with weights of its own: SelfDrafter::Create over LoadDraftModel's result.
    return absl::InvalidArgumentError(
        "the self drafter needs weights: create it with SelfDrafter::Create (dqserve generate: "
        "--draft-format or --draft-weights)");
  } else if (name == "dflash") {
    // It reads its own checkpoint and the target's: DFlashDrafter::Load.
    return absl::InvalidArgumentError(
        "the dflash drafter needs weights: create it with DFlashDrafter::Load (dqserve generate: "
        "--speculative dflash --draft-weights DIR)");
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown drafter '", std::string(name),
                     "'; known: ngram, self, dflash (or none to turn it off)"));
  }
  DQ_RETURN_IF_ERROR(drafter->CheckTarget(target));
  return drafter;
}

void AdaptiveK::Update(int drafted, int accepted) {
  if (drafted <= 0) return;
  rate_ = kDecay * rate_ + (1.0 - kDecay) * static_cast<double>(accepted) / drafted;
  if (!adaptive_) return;
  if (rate_ > kGrow) k_ = std::min(k_ + 1, k_max_);
  if (rate_ < kShrink) k_ = std::max(k_ - 1, 1);
}

}  // namespace dq
