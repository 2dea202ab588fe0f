#include "engine/model/hf_export.h"

#include <filesystem>
#include <fstream>

#include "engine/checkpoint/gguf_file.h"
#include "engine/model/architecture.h"
#include "engine/model/gemma3.h"
#include "engine/model/hf_from_gguf.h"
#include "engine/model/qwen3_5.h"

namespace dq {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

absl::StatusOr<json> PreTokenizerJson(const std::string& pre) {
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  if (pre == "gpt-2") return byte_level;
  if (pre == "smollm" || pre == "starcoder") {
    return json{{"type", "Sequence"},
                {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level}}};
  }
  if (pre == "qwen2") {
    const std::string regex =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    return json{{"type", "Sequence"},
                {"pretokenizers",
                 {{{"type", "Split"},
                   {"pattern", {{"Regex", regex}}},
                   {"behavior", "Isolated"},
                   {"invert", false}},
                  {{"type", "ByteLevel"},
                   {"add_prefix_space", false},
                   {"trim_offsets", false},
                   {"use_regex", false}}}}};
  }
  return absl::UnimplementedError(absl::StrCat("cannot export GGUF pre-tokenizer '", pre,
                                               "' to tokenizer.json; supported: gpt-2, "
                                               "smollm, starcoder, qwen2"));
}

absl::Status WriteJson(const fs::path& path, const json& j) {
  std::ofstream f(path);
  if (!f) return absl::PermissionDeniedError("cannot write " + path.string());
  f << j.dump(2) << "\n";
  return f ? absl::OkStatus() : absl::DataLossError("failed writing " + path.string());
}

}  // namespace

json HfConfigJson(const ModelConfig& c) {
  const Architecture* arch = FindArchitecture(c.architecture);
  const std::string hf_class = arch ? std::string(arch->hf_class) : c.architecture;
  json j = {{"architectures", {hf_class}},
            {"model_type", c.architecture},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size},
            {"num_hidden_layers", c.num_layers},
            {"num_attention_heads", c.num_heads},
            {"num_key_value_heads", c.num_kv_heads},
            {"head_dim", c.head_dim},
            {"hidden_act", "silu"},
            {"max_position_embeddings", c.max_context},
            {"rms_norm_eps", c.rms_norm_eps},
            {"rope_theta", c.rope_theta},
            {"tie_word_embeddings", c.tie_word_embeddings}};
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids.front();
  if (c.rope_style == RopeStyle::kInterleaved) j["dq_rope_interleaved"] = true;
  if (const HfFromGguf* h = FindHfFromGguf(c.architecture); h != nullptr && h->config) {
    h->config(c, j);
  }
  return j;
}

const HfFromGguf* FindHfFromGguf(std::string_view architecture) {
  if (architecture == Gemma3Architecture().name) return &Gemma3HfFromGguf();
  if (architecture == Qwen3_5Architecture().name) return &Qwen3_5HfFromGguf();
  return nullptr;
}

absl::StatusOr<json> HfTokenizerJsonFromGguf(const GgufFile& g) {
  DQ_ASSIGN_OR_RETURN(std::string model, g.GetString("tokenizer.ggml.model"));
  if (model != "gpt2") {
    return absl::UnimplementedError("only byte-level BPE (gpt2) GGUF tokenizers can be exported");
  }
  DQ_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens,
                      g.GetStringArray("tokenizer.ggml.tokens"));
  DQ_ASSIGN_OR_RETURN(const std::vector<std::string>* merges,
                      g.GetStringArray("tokenizer.ggml.merges"));
  DQ_ASSIGN_OR_RETURN(std::string pre, g.GetString("tokenizer.ggml.pre"));
  DQ_ASSIGN_OR_RETURN(json pre_json, PreTokenizerJson(pre));
  auto types = g.GetIntArray("tokenizer.ggml.token_type");
  json vocab = json::object(), added = json::array();
  for (size_t i = 0; i < tokens->size(); ++i) {
    vocab[(*tokens)[i]] = i;
    const int64_t type = types.ok() && i < types->size() ? (*types)[i] : 1;
    if (type == 3 || type == 4) {  // control, user-defined
      added.push_back({{"id", i},
                       {"content", (*tokens)[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", type == 3}});
    }
  }
  const json decoder = {{"type", "ByteLevel"},
                        {"add_prefix_space", true},
                        {"trim_offsets", true},
                        {"use_regex", true}};
  return json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", pre == "qwen2" ? json{{"type", "NFC"}} : json(nullptr)},
              {"pre_tokenizer", pre_json},
              {"post_processor", nullptr},
              {"decoder", decoder},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", *merges}}}};
}

absl::Status WriteTokenizerFiles(const std::string& source_path, const std::string& out_dir) {
  const fs::path out(out_dir);
  if (fs::is_directory(source_path)) {
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}) {
      const fs::path src = fs::path(source_path) / name;
      if (fs::exists(src)) fs::copy_file(src, out / name, fs::copy_options::overwrite_existing);
    }
    return absl::OkStatus();
  }
  DQ_ASSIGN_OR_RETURN(auto gguf, GgufFile::Open(source_path));
  DQ_ASSIGN_OR_RETURN(json tok, HfTokenizerJsonFromGguf(*gguf));
  DQ_RETURN_IF_ERROR(WriteJson(out / "tokenizer.json", tok));
  json cfg = json::object();
  if (auto t = gguf->GetString("tokenizer.chat_template"); t.ok()) cfg["chat_template"] = *t;
  auto tokens = gguf->GetStringArray("tokenizer.ggml.tokens");
  auto eos = gguf->GetInt("tokenizer.ggml.eos_token_id");
  if (tokens.ok() && eos.ok() && *eos >= 0 && static_cast<size_t>(*eos) < (*tokens)->size()) {
    cfg["eos_token"] = (**tokens)[*eos];
  }
  auto bos = gguf->GetInt("tokenizer.ggml.bos_token_id");
  if (tokens.ok() && bos.ok() && *bos >= 0 && static_cast<size_t>(*bos) < (*tokens)->size()) {
    cfg["bos_token"] = (**tokens)[*bos];
  }
  return WriteJson(out / "tokenizer_config.json", cfg);
}

}  // namespace dq
