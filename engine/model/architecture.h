// An architecture: how its config is read and which model program its checkpoint binds to. Each
// architecture file (engine/model/<arch>.cpp) defines one; architecture.cpp lists them, and
// nothing else names an architecture. Adding one touches no backend unless it needs a new block.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/model/model_config.h"
#include "engine/model/model_program.h"
#include "engine/model/tensor_names.h"
#include "engine/model/weight_binder.h"

namespace dq {

struct Architecture {
  std::string_view name;  // ModelConfig::architecture and GGUF's general.architecture
  // HF config.json's model_type and architectures[0] values that mean this architecture.
  std::vector<std::string_view> hf_names;
  std::string_view hf_class;  // what an HF export writes as architectures[0]
  // Facts the architecture fixes in its config (the RoPE pairing its GGUF files use); null:
  // none. What its layers hold (q/k norms, ...) is in the blocks `bind` declares.
  void (*configure)(ModelConfig& config, bool gguf) = nullptr;
  // Binds the checkpoint's tensors into the program's blocks (weights stay in the mapping).
  absl::StatusOr<ModelProgram> (*bind)(const WeightBinder& binder, const TensorNames& names,
                                       const ModelConfig& config) = nullptr;
  // Reads what only this architecture has from HF's config.json, RoPE included (then the
  // generic RoPE reading is skipped); null: nothing beyond the Llama fields.
  absl::Status (*configure_hf)(const nlohmann::json& config, ModelConfig& c) = nullptr;
  bool hf_sandwich_norms = false;  // TensorNames' Gemma layout of HF norm names
  bool reads_gguf = true;          // false: its GGUF metadata is not read yet
  // Reads what only this architecture has from GGUF metadata (after the generic `<arch>.*`
  // keys and `configure`); null: nothing beyond them.
  absl::Status (*configure_gguf)(const GgufFile& gguf, ModelConfig& c) = nullptr;
  // llama.cpp's general.architecture (and its metadata keys' prefix) when it is not `name`
  // ("qwen35"); empty: `name`.
  std::string_view gguf_name;
  // llama.cpp stores the MLP's input norm as "post_attention_norm" (qwen35), not "ffn_norm".
  bool gguf_ffn_norm_post_attention = false;
};

// Every architecture this build runs.
std::span<const Architecture* const> Architectures();
// By name or by an HF name; null when unknown.
const Architecture* FindArchitecture(std::string_view name);
// FindArchitecture or an InvalidArgument error that lists the supported names.
absl::StatusOr<const Architecture*> RequireArchitecture(std::string_view name);

// The tensor names of `arch`'s checkpoints in either convention.
TensorNames ArchitectureTensorNames(const Architecture& arch, bool gguf);

// Binds `config.architecture`'s program from `checkpoint` (GGUF or HF names) and finalizes it.
absl::StatusOr<ModelProgram> BindModelProgram(const Checkpoint& checkpoint,
                                              const ModelConfig& config);

// Blocks several architectures share, bound from the Llama-family tensor names.
// `qk_norm`: with q/k norms; `post_norm`: with the block's output norm (Gemma).
absl::StatusOr<AttentionBlock> BindAttentionBlock(const WeightBinder& binder,
                                                  const TensorNames& names,
                                                  const ModelConfig& config, int layer,
                                                  bool qk_norm, bool post_norm = false);
absl::StatusOr<MlpBlock> BindMlpBlock(const WeightBinder& binder, const TensorNames& names,
                                      const ModelConfig& config, int layer, bool post_norm = false);
// Qwen3.5's Gated DeltaNet block, shaped by the config's gdn_* fields.
absl::StatusOr<GatedDeltaBlock> BindGatedDeltaBlock(const WeightBinder& binder,
                                                    const TensorNames& names,
                                                    const ModelConfig& config, int layer);
// The embedding, final norm and lm_head (tied to the embedding when the checkpoint has none).
absl::Status BindEmbeddingsAndHead(const WeightBinder& binder, const TensorNames& names,
                                   const ModelConfig& config, ModelProgram* out);

}  // namespace dq
