#include "engine/model/tokenizer_loader.h"

#include <filesystem>
#include <fstream>
#include <optional>

#include "nlohmann/json.hpp"

namespace dq {
namespace {

struct GgufPreTokenizer {
  const char* gguf_name;
  PreTokenizer pre;
  Normalizer normalizer;
  bool ignore_merges;
};

// tokenizer.ggml.pre values (llama.cpp's names) and the HF configuration each stands for.
constexpr GgufPreTokenizer kPreTokenizers[] = {
    {"gpt-2", PreTokenizer::kGpt2, Normalizer::kNone, false},
    {"smollm", PreTokenizer::kSmolLM, Normalizer::kNone, false},
    {"starcoder", PreTokenizer::kSmolLM, Normalizer::kNone, false},
    {"qwen2", PreTokenizer::kQwen2, Normalizer::kNfc, false},
    {"deepseek-r1-qwen", PreTokenizer::kQwen2, Normalizer::kNfc, false},
    {"llama-bpe", PreTokenizer::kLlama3, Normalizer::kNone, true},
    {"llama3", PreTokenizer::kLlama3, Normalizer::kNone, true},
    {"llama-v3", PreTokenizer::kLlama3, Normalizer::kNone, true},
};

absl::Status SetPreTokenizer(const GgufFile& gguf, TokenizerSpec* spec) {
  auto pre = gguf.GetString("tokenizer.ggml.pre");
  if (!pre.ok()) {
    return absl::InvalidArgumentError(
        "GGUF has no tokenizer.ggml.pre, so its pre-tokenizer is unknown; re-convert the model "
        "with a recent llama.cpp convert_hf_to_gguf.py");
  }
  std::string known;
  for (const GgufPreTokenizer& p : kPreTokenizers) {
    if (*pre == p.gguf_name) {
      spec->pre_tokenizer = p.pre;
      spec->normalizer = p.normalizer;
      spec->ignore_merges = p.ignore_merges;
      return absl::OkStatus();
    }
    absl::StrAppend(&known, known.empty() ? "" : ", ", p.gguf_name);
  }
  return absl::InvalidArgumentError(absl::StrCat("GGUF tokenizer.ggml.pre \"", *pre,
                                                 "\" is not supported (supported: ", known,
                                                 "); use a model with one of these tokenizers"));
}

absl::StatusOr<std::optional<int32_t>> OptionalId(const GgufFile& gguf, const std::string& key) {
  if (!gguf.Has(key)) return std::optional<int32_t>();
  DQ_ASSIGN_OR_RETURN(int64_t id, gguf.GetInt(key));
  if (id < 0 || id > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF ", key, " = ", id, " is not a token id"));
  }
  return std::optional<int32_t>(static_cast<int32_t>(id));
}

// tokenizer.ggml.model "llama" (SentencePiece, llama.cpp's LLAMA_VOCAB_TYPE_SPM): scores instead
// of merges; spaces are "▁", with one prepended to every text fragment when add_space_prefix
// (default true), and decoding is HF's Replace, ByteFallback, Fuse (+ Strip of that space).
absl::Status SetSentencePiece(const GgufFile& gguf, TokenizerSpec* spec) {
  if (!gguf.Has("tokenizer.ggml.scores")) {
    return absl::InvalidArgumentError(
        "GGUF tokenizer.ggml.model \"llama\" (SentencePiece) has no tokenizer.ggml.scores; only "
        "\"gpt2\" (byte-level BPE) vocabularies load without scores. Re-convert the model with "
        "llama.cpp's convert_hf_to_gguf.py");
  }
  DQ_ASSIGN_OR_RETURN(std::vector<double> scores, gguf.GetFloatArray("tokenizer.ggml.scores"));
  spec->scores.assign(scores.begin(), scores.end());
  spec->byte_level = false;
  bool add_space_prefix = true;
  if (gguf.Has("tokenizer.ggml.add_space_prefix")) {
    DQ_ASSIGN_OR_RETURN(add_space_prefix, gguf.GetBool("tokenizer.ggml.add_space_prefix"));
  }
  const std::string space = "\u2581";
  using NK = NormalizerStep::Kind;
  using DK = DecoderStep::Kind;
  if (add_space_prefix) spec->normalizer_steps.push_back({NK::kPrepend, "", space});
  spec->normalizer_steps.push_back({NK::kReplace, " ", space});
  spec->decoder_steps = {{DK::kReplace, space, " "}, {DK::kByteFallback}, {DK::kFuse}};
  if (add_space_prefix) spec->decoder_steps.push_back({DK::kStrip, "", " ", 1, 0});
  return absl::OkStatus();
}

absl::StatusOr<TokenizerSpec> SpecFromGguf(const GgufFile& gguf) {
  DQ_ASSIGN_OR_RETURN(std::string model, gguf.GetString("tokenizer.ggml.model"));
  if (model != "gpt2" && model != "llama") {
    return absl::InvalidArgumentError(absl::StrCat(
        "GGUF tokenizer.ggml.model is \"", model,
        "\"; dqserve supports only \"gpt2\" (byte-level BPE) and \"llama\" (SentencePiece) "
        "tokenizers"));
  }
  TokenizerSpec spec;
  if (model == "llama") {
    DQ_RETURN_IF_ERROR(SetSentencePiece(gguf, &spec));
  } else {
    DQ_RETURN_IF_ERROR(SetPreTokenizer(gguf, &spec));
  }
  DQ_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens,
                      gguf.GetStringArray("tokenizer.ggml.tokens"));
  spec.tokens = *tokens;
  if (model == "gpt2") {
    DQ_ASSIGN_OR_RETURN(const std::vector<std::string>* merges,
                        gguf.GetStringArray("tokenizer.ggml.merges"));
    spec.merges.reserve(merges->size());
    for (const std::string& line : *merges) {
      DQ_ASSIGN_OR_RETURN(auto pair, SplitMergeLine(line));
      spec.merges.push_back(std::move(pair));
    }
  }
  if (gguf.Has("tokenizer.ggml.token_type")) {
    DQ_ASSIGN_OR_RETURN(std::vector<int64_t> types, gguf.GetIntArray("tokenizer.ggml.token_type"));
    spec.token_types.assign(types.begin(), types.end());
  }
  DQ_ASSIGN_OR_RETURN(spec.bos_id, OptionalId(gguf, "tokenizer.ggml.bos_token_id"));
  DQ_ASSIGN_OR_RETURN(spec.eos_id, OptionalId(gguf, "tokenizer.ggml.eos_token_id"));
  if (model == "llama") {  // gpt2: bytes missing from the vocabulary stay dropped, as in HF.
    DQ_ASSIGN_OR_RETURN(spec.unk_id, OptionalId(gguf, "tokenizer.ggml.unknown_token_id"));
  }
  return spec;
}

std::optional<nlohmann::json> ReadJsonIfPresent(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

// The id of tokenizer_config.json's `key` ("eos_token": "<|im_end|>" or {"content": ...}), else
// config.json's `id_key` (an id or a list of ids).
std::optional<int32_t> SpecialId(const Tokenizer& tok, const std::optional<nlohmann::json>& tcfg,
                                 const std::optional<nlohmann::json>& cfg, const char* key,
                                 const char* id_key) {
  if (tcfg && tcfg->contains(key)) {
    const nlohmann::json& v = (*tcfg)[key];
    std::string content;
    if (v.is_string()) content = v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) {
      content = v["content"].get<std::string>();
    }
    if (auto id = tok.TokenToId(content); id.has_value() && !content.empty()) return id;
  }
  if (cfg && cfg->contains(id_key)) {
    nlohmann::json v = (*cfg)[id_key];
    if (v.is_array() && !v.empty()) v = v[0];
    if (v.is_number_integer()) {
      const auto id = v.get<int64_t>();
      if (id >= 0 && id < tok.vocab_size()) return static_cast<int32_t>(id);
    }
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<Tokenizer> LoadTokenizerFromGguf(const GgufFile& gguf) {
  absl::StatusOr<TokenizerSpec> spec = SpecFromGguf(gguf);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<Tokenizer> tok = Tokenizer::FromSpec(*std::move(spec));
  if (!tok.ok()) {
    return absl::Status(tok.status().code(),
                        absl::StrCat("GGUF tokenizer: ", std::string(tok.status().message())));
  }
  return tok;
}

absl::StatusOr<Tokenizer> LoadTokenizerFromDir(const std::string& dir) {
  const std::filesystem::path root(dir);
  const std::filesystem::path json_path = root / "tokenizer.json";
  if (!std::filesystem::exists(json_path)) {
    return absl::NotFoundError(
        absl::StrCat(dir,
                     " has no tokenizer.json; dqserve needs the HF fast-tokenizer file next to the "
                     "weights (tokenizer.model / vocab.json alone are not supported)"));
  }
  DQ_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::FromHfJson(json_path.string()));
  const auto tcfg = ReadJsonIfPresent(root / "tokenizer_config.json");
  const auto cfg = ReadJsonIfPresent(root / "config.json");
  DQ_RETURN_IF_ERROR(tok.SetBosEos(SpecialId(tok, tcfg, cfg, "bos_token", "bos_token_id"),
                                   SpecialId(tok, tcfg, cfg, "eos_token", "eos_token_id")));
  return tok;
}

}  // namespace dq
