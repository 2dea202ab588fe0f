// Offloaded disaggregated prefill (ODP, docs/odp.md): on one device the compact decode weights
// stay resident and a second, prefill-only checkpoint is streamed layer by layer for long
// prompts. Streaming costs a fixed time per pass (the layers' bytes over the link) and saves
// time per token (the prefill format computes faster), so each pass picks its weights by size:
// below a crossover length it runs on the resident decode weights, from it on the streamed ones.
// This file is the backend-independent part: the routing model, the crossover from measured
// timings, and the start-up checks that the two checkpoints can share one KV cache.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "common/tokenizer/tokenizer.h"
#include "engine/model/forward_model.h"
#include "engine/model/model_config.h"

namespace dq {

// A crossover that never streams (streaming was slower at every measured length).
inline constexpr int64_t kOdpNeverStream = std::numeric_limits<int64_t>::max();

// The prefill phase's forward model under ODP: a pass whose batch has at least
// `crossover_tokens` new tokens runs on `streamed` (the streamed prefill checkpoint), any other
// on `resident` (the decode model's weights). Both share the KV cache, so either leaves the same
// kind of KV behind. The decision is per pass: the streaming cost is paid once per pass whatever
// the number of requests in it.
class OdpForwardModel : public ForwardModel {
 public:
  OdpForwardModel(std::shared_ptr<ForwardModel> resident, std::shared_ptr<ForwardModel> streamed,
                  int64_t crossover_tokens);

  const ModelConfig& config() const override { return streamed_->config(); }
  std::string_view backend() const override { return streamed_->backend(); }
  absl::Status Forward(const Batch& batch, KvBlockPool& pool, ThreadPool& threads,
                       BatchLogits* logits, const ForwardHooks& hooks) const override;
  bool SupportsDeviceSampling() const override {
    return resident_->SupportsDeviceSampling() && streamed_->SupportsDeviceSampling();
  }
  absl::Status ForwardSample(const Batch& batch, KvBlockPool& pool, ThreadPool& threads,
                             std::span<const DeviceSampling> per_item,
                             std::span<int32_t> out_tokens,
                             const ForwardHooks& hooks) const override;

  // Whether `batch` runs on the streamed weights.
  bool Streams(const Batch& batch) const { return batch.num_tokens() >= crossover_; }
  int64_t crossover_tokens() const { return crossover_; }
  const ForwardModel& resident() const { return *resident_; }
  const ForwardModel& streamed() const { return *streamed_; }
  // Passes run on each side so far (metrics, tests).
  int64_t resident_passes() const { return resident_passes_.load(); }
  int64_t streamed_passes() const { return streamed_passes_.load(); }

 private:
  const ForwardModel& Pick(const Batch& batch) const;

  std::shared_ptr<ForwardModel> resident_, streamed_;
  int64_t crossover_;
  mutable std::atomic<int64_t> resident_passes_{0}, streamed_passes_{0};
};

// One calibration point: the time of one prefill pass of `tokens` tokens on each side.
struct OdpTiming {
  int64_t tokens = 0;
  double resident_seconds = 0;
  double streamed_seconds = 0;
};

// The crossover from timings at increasing lengths: the shortest pass from which streaming is
// faster at every longer measured length, interpolated linearly between the last length where
// it was slower and the next. The first length if streaming always wins; kOdpNeverStream if it
// loses at the longest. InvalidArgument when `timings` is empty or not increasing.
absl::StatusOr<int64_t> CrossoverFromTimings(std::span<const OdpTiming> timings);

struct OdpCalibrationOptions {
  std::vector<int64_t> lengths = {256, 1024, 4096, 8192};  // capped by the pool and pass size
  int repeats = 2;  // the fastest of these counts (the first pass of each side also warms up)
};

// Times one prefill pass per length and side on throw-away sequences of `pool` (random tokens;
// their KV blocks are released again). Lengths above `max_tokens` are skipped.
absl::StatusOr<std::vector<OdpTiming>> MeasureOdpTimings(const ForwardModel& resident,
                                                         const ForwardModel& streamed,
                                                         KvBlockPool& pool, ThreadPool& threads,
                                                         int64_t max_tokens,
                                                         const OdpCalibrationOptions& options);

// Start-up checks that a prefill checkpoint can serve a decode model under ODP: the same KV
// layout (architecture, layers, KV heads, head dim, RoPE) and vocabulary, and the same tokenizer
// (every token's bytes and special flag, BOS/EOS). Errors say which differs and what to do.
absl::Status CheckOdpConfigs(const ModelConfig& prefill, const ModelConfig& decode);
absl::Status CheckOdpTokenizers(const Tokenizer& prefill, const Tokenizer& decode);

}  // namespace dq
