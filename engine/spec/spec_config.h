// How a generator speculates: which drafter, how many tokens it drafts per step, whether that
// number adapts, and the per-request counters it reports.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "engine/model/model_config.h"
#include "engine/spec/drafter.h"

namespace dq {

// Longest draft per step. Verification feeds k + 1 tokens per sequence, and past ~16 even a
// perfect drafter gains little while a wrong draft wastes the whole forward pass.
inline constexpr int kMaxSpecK = 16;

struct SpecConfig {
  int k = 4;             // tokens drafted per step (the most, when adaptive), in [1, kMaxSpecK]
  bool adaptive = true;  // shrink/grow k per sequence from its running acceptance rate
};

// InvalidArgument naming the field and range, e.g. "--spec-k must be in [1, 16], got 0".
absl::Status Validate(const SpecConfig& config);

// The weightless drafter called `name` ("ngram"), checked against `target`. "none" or "" is not
// a drafter (the caller runs without one). Errors: unknown name (listing the known ones), a
// drafter that does not fit the target, "self" and "dflash" (they need weights:
// SelfDrafter::Create, DFlashDrafter::Load).
absl::StatusOr<std::unique_ptr<Drafter>> CreateDrafter(std::string_view name,
                                                       const ModelConfig& target);

// Per-request speculation counters.
struct SpecStats {
  int64_t steps = 0;     // target forward passes in decode (each verifies one draft)
  int64_t drafted = 0;   // draft tokens fed to the target
  int64_t accepted = 0;  // draft tokens the target kept
  int64_t emitted = 0;   // tokens produced by those steps (accepted + one per step, less stops)

  double acceptance_rate() const { return drafted > 0 ? double(accepted) / drafted : 0.0; }
  // Mean tokens per target forward pass: the speedup's upper bound at equal step cost.
  double acceptance_length() const { return steps > 0 ? double(emitted) / steps : 0.0; }
};

// The per-sequence draft length: an exponential moving average of the fraction of each draft
// the target accepted; above kGrow the next draft is one longer, below kShrink one shorter,
// bounded [1, k_max]. Why: a wrong draft costs k extra positions in the verify pass, a right
// one saves k passes, so k follows how predictable the sequence is right now.
class AdaptiveK {
 public:
  AdaptiveK(int k_max, bool adaptive) : k_max_(k_max), k_(k_max), adaptive_(adaptive) {}

  int k() const { return k_; }
  double rate() const { return rate_; }
  // A step drafted `drafted` (> 0) tokens and the target kept `accepted` of them.
  void Update(int drafted, int accepted);

  static constexpr double kDecay = 0.7;
  static constexpr double kGrow = 0.75;
  static constexpr double kShrink = 0.35;

 private:
  int k_max_;
  int k_;
  bool adaptive_;
  double rate_ = 1.0;  // optimistic start: draft the most until the sequence proves otherwise
};

}  // namespace dq
