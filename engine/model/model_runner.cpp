#include "engine/model/model_runner.h"

#include <algorithm>

#include "common/logging.h"
#include "engine/model/llama.h"
#include "engine/model/qwen3.h"

namespace dq {
namespace {

absl::StatusOr<DecoderWeights> LoadWeights(const Checkpoint& checkpoint,
                                           const ModelConfig& config) {
  if (config.architecture == "llama") return LoadLlamaWeights(checkpoint, config);
  if (config.architecture == "qwen3") return LoadQwen3Weights(checkpoint, config);
  return absl::InvalidArgumentError(
      absl::StrCat("no model graph for architecture '", config.architecture, "'"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(
    const Checkpoint& checkpoint, const ModelConfig& config, const ModelRunnerOptions& options) {
  DQ_RETURN_IF_ERROR(config.Validate());
  if (options.kv_block_size <= 0) {
    return absl::InvalidArgumentError("kv_block_size must be positive");
  }
  DQ_ASSIGN_OR_RETURN(DecoderWeights weights, LoadWeights(checkpoint, config));
  KvCacheOptions kv;
  kv.num_layers = config.num_layers;
  kv.num_kv_heads = config.num_kv_heads;
  kv.head_dim = config.head_dim;
  kv.block_size = options.kv_block_size;
  const int capacity =
      options.kv_capacity > 0 ? options.kv_capacity : std::min(config.max_context, 8192);
  kv.num_blocks = (capacity + kv.block_size - 1) / kv.block_size;
  const int threads = options.threads > 0 ? options.threads : DefaultThreadCount();
  spdlog::debug("model runner: {} layers, KV pool {} blocks x {} tokens, {} threads",
                config.num_layers, kv.num_blocks, kv.block_size, threads);
  return std::unique_ptr<ModelRunner>(
      new ModelRunner(DecoderModel(config, std::move(weights)), kv, threads));
}

}  // namespace dq
