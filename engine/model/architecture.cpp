#include "engine/model/architecture.h"

#include "absl/strings/str_join.h"
#include "engine/model/gemma3.h"
#include "engine/model/llama.h"
#include "engine/model/qwen3.h"
#include "engine/model/qwen3_5.h"

namespace dq {

std::span<const Architecture* const> Architectures() {
  static const Architecture* const kAll[] = {&LlamaArchitecture(), &Qwen3Architecture(),
                                             &Gemma3Architecture(), &Qwen3_5Architecture()};
  return kAll;
}

const Architecture* FindArchitecture(std::string_view name) {
  for (const Architecture* a : Architectures()) {
    if (a->name == name || (!a->gguf_name.empty() && a->gguf_name == name)) return a;
    for (std::string_view hf : a->hf_names) {
      if (hf == name) return a;
    }
  }
  return nullptr;
}

absl::StatusOr<const Architecture*> RequireArchitecture(std::string_view name) {
  if (const Architecture* a = FindArchitecture(name)) return a;
  std::vector<std::string> names;
  for (const Architecture* a : Architectures()) names.emplace_back(a->name);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model architecture '", std::string(name),
                   "'; this build supports: ", absl::StrJoin(names, ", ")));
}

TensorNames ArchitectureTensorNames(const Architecture& arch, bool gguf) {
  return TensorNames(gguf, "model.layers.", arch.hf_sandwich_norms,
                     arch.gguf_ffn_norm_post_attention);
}

absl::StatusOr<ModelProgram> BindModelProgram(const Checkpoint& checkpoint,
                                              const ModelConfig& config) {
  DQ_ASSIGN_OR_RETURN(const Architecture* arch, RequireArchitecture(config.architecture));
  const WeightBinder binder(checkpoint, config.quant);
  const TensorNames names = ArchitectureTensorNames(*arch, checkpoint.format() == "gguf");
  DQ_ASSIGN_OR_RETURN(ModelProgram program, arch->bind(binder, names, config));
  const SequenceStateSpec state = program.Finalize();
  // Every layer mixes tokens once: with attention (a KV layer) or a Gated DeltaNet (a recurrent
  // state in the sequence's slot).
  if (state.kv_layers + state.recurrent_layers != config.num_layers) {
    return absl::InternalError(absl::StrCat("the ", std::string(arch->name), " program declares ",
                                            state.kv_layers, " KV and ", state.recurrent_layers,
                                            " recurrent layers for ", config.num_layers,
                                            " layers; the sequence state is sized per layer"));
  }
  return program;
}

namespace {

// Binds a block's tensors from its slot tables (model_program.h); an optional vector only when
// `wanted(role)`.
template <typename B, size_t NL, size_t NV, typename Wanted>
absl::StatusOr<B> BindBlock(const WeightBinder& binder, const TensorNames& names,
                            const ModelConfig& c, int layer, const LinearSlot<B> (&linears)[NL],
                            const VectorSlot<B> (&vectors)[NV], const Wanted& wanted) {
  B block;
  for (const VectorSlot<B>& s : vectors) {
    if (s.optional && !wanted(std::string_view(s.role))) continue;
    const std::string name = s.bare ? names.LayerBare(layer, s.role) : names.Layer(layer, s.role);
    std::vector<int64_t> shape = {s.size(c)};
    if (s.kernel != nullptr) {  // HF keeps Conv1d's [channels, 1, kernel]; llama.cpp squeezes it
      const int64_t k = s.kernel(c), channels = s.size(c) / k;
      shape =
          names.gguf() ? std::vector<int64_t>{channels, k} : std::vector<int64_t>{channels, 1, k};
    }
    DQ_ASSIGN_OR_RETURN(block.*s.values, binder.Values(name, shape));
  }
  for (const LinearSlot<B>& s : linears) {
    DQ_ASSIGN_OR_RETURN(block.*s.weight, binder.Matrix(names.Layer(layer, s.role),
                                                       s.out_features(c), s.in_features(c)));
  }
  return block;
}

}  // namespace

absl::StatusOr<AttentionBlock> BindAttentionBlock(const WeightBinder& binder,
                                                  const TensorNames& names, const ModelConfig& c,
                                                  int i, bool qk_norm, bool post_norm) {
  return BindBlock(
      binder, names, c, i, kAttentionLinears, kAttentionVectors,
      [&](std::string_view role) { return role == "post_attention_norm" ? post_norm : qk_norm; });
}

absl::StatusOr<MlpBlock> BindMlpBlock(const WeightBinder& binder, const TensorNames& names,
                                      const ModelConfig& c, int i, bool post_norm) {
  return BindBlock(binder, names, c, i, kMlpLinears, kMlpVectors,
                   [&](std::string_view) { return post_norm; });
}

absl::StatusOr<GatedDeltaBlock> BindGatedDeltaBlock(const WeightBinder& binder,
                                                    const TensorNames& names, const ModelConfig& c,
                                                    int i) {
  DQ_ASSIGN_OR_RETURN(GatedDeltaBlock g,
                      BindBlock(binder, names, c, i, kGatedDeltaLinears, kGatedDeltaVectors,
                                [](std::string_view) { return false; }));
  g.key_heads = c.gdn_key_heads;
  g.value_heads = c.gdn_value_heads;
  g.key_dim = c.gdn_key_dim;
  g.value_dim = c.gdn_value_dim;
  g.kernel = c.gdn_conv_kernel;
  return g;
}

absl::Status BindEmbeddingsAndHead(const WeightBinder& binder, const TensorNames& names,
                                   const ModelConfig& c, ModelProgram* w) {
  DQ_ASSIGN_OR_RETURN(w->embedding, binder.Matrix(names.Embedding(), c.vocab_size, c.hidden_size));
  DQ_ASSIGN_OR_RETURN(w->final_norm, binder.Vector(names.FinalNorm(), c.hidden_size));
  // Some tied checkpoints still store lm_head; an untied one must.
  if (binder.Has(names.LmHead())) {
    DQ_ASSIGN_OR_RETURN(w->lm_head, binder.Matrix(names.LmHead(), c.vocab_size, c.hidden_size));
  } else if (c.tie_word_embeddings) {
    w->lm_head = w->embedding;
  } else {
    return absl::NotFoundError(absl::StrCat("checkpoint has no '", names.LmHead(),
                                            "' and the config does not tie embeddings"));
  }
  return absl::OkStatus();
}

}  // namespace dq
