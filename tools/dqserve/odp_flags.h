// `dqserve generate --odp`: offloaded disaggregated prefill in one process on one GPU
// (docs/odp.md). The decode weights stay resident; --prefill-weights is streamed per pass for
// prompts from the crossover length on.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "common/tokenizer/tokenizer.h"
#include "engine/model/model_config.h"
#include "engine/model/model_runner.h"

namespace dq::cli {

struct OdpFlags {
  bool enabled = false;
  int64_t crossover_tokens = 0;  // 0: measured at start-up
  int slots = 2;
  std::string source = "disk";  // "disk" (an image file) or "host" (pinned memory)
  std::string image_dir;        // empty: the system temp folder
  // Not --odp flags: generate's --prefill-attention fp8 (the streamed model's attention),
  // --batch-invariant (the resident decode model's steps) and --cuda-kernels (both models),
  // passed on to the CUDA backend.
  bool fp8_attention = false;
  bool batch_invariant = false;
  std::string cuda_kernels;  // generate's --cuda-kernels (cuda::ParseKernelOptions)
};

void AddOdpFlags(CLI::App* cmd, OdpFlags* o);

// The CUDA backend streaming the prefill checkpoint, after checking that it can serve the
// decode model (KV layout, vocabulary, tokenizer). Errors: no CUDA in this build, a bad flag,
// a mismatched checkpoint.
absl::StatusOr<BackendFactory> OdpBackend(const OdpFlags& o, const ModelConfig& prefill,
                                          const ModelConfig& decode,
                                          const Tokenizer& prefill_tokenizer,
                                          const Tokenizer& decode_tokenizer);

}  // namespace dq::cli
