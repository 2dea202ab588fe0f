// ModelRunner: a model's weights bound to a backend, its KV pool and its threads.
#pragma once

#include <memory>

#include "common/status.h"
#include "common/thread_pool.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/kvcache/kv_block_pool.h"
#include "engine/model/batch.h"
#include "engine/model/decoder_model.h"
#include "engine/model/model_config.h"

namespace dq {

struct ModelRunnerOptions {
  int threads = 0;         // 0: one per hardware thread
  int kv_block_size = 16;  // tokens per KV block
  int kv_capacity = 0;     // tokens the KV pool holds in all; 0: min(context, 8192)
};

class ModelRunner {
 public:
  // Binds the checkpoint's tensors for `config.architecture` (the checkpoint must outlive the
  // runner: weights are used in place from its mapping).
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(const Checkpoint& checkpoint,
                                                             const ModelConfig& config,
                                                             const ModelRunnerOptions& options);

  const ModelConfig& config() const { return model_.config(); }
  KvBlockPool& kv_pool() { return pool_; }
  ThreadPool& threads() { return threads_; }

  // One forward pass (prefill, decode, or both mixed). See DecoderModel::Forward.
  absl::Status Forward(const Batch& batch, BatchLogits* logits) {
    return model_.Forward(batch, pool_, threads_, logits);
  }

 private:
  ModelRunner(DecoderModel model, const KvCacheOptions& kv, int threads)
      : model_(std::move(model)), pool_(kv), threads_(threads) {}
  DecoderModel model_;
  KvBlockPool pool_;
  ThreadPool threads_;
};

}  // namespace dq
