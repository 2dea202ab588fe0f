#include "engine/model/model_loader.h"

#include <filesystem>
#include <fstream>

#include "engine/checkpoint/gguf_file.h"
#include "engine/checkpoint/open_checkpoint.h"
#include "engine/model/tokenizer_loader.h"

namespace dq {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<nlohmann::json> ReadJson(const fs::path& p) {
  std::ifstream f(p);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read ", p.string()));
  nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(p.string() + " is not valid JSON");
  return j;
}

// The template from tokenizer_config.json, or chat_template.jinja beside it; "" when neither.
std::string DirChatTemplate(const fs::path& dir) {
  auto cfg = ReadJson(dir / "tokenizer_config.json");
  if (cfg.ok() && cfg->contains("chat_template") && (*cfg)["chat_template"].is_string()) {
    return (*cfg)["chat_template"].get<std::string>();
  }
  std::ifstream f(dir / "chat_template.jinja");
  if (!f) return "";
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// The template with the tokenizer's BOS/EOS text, which templates print as bos_token/eos_token.
absl::Status SetChatTemplate(const std::string& source, Model& m) {
  ChatSpecialTokens tokens;
  if (auto id = m.tokenizer.bos_id()) tokens.bos = std::string(m.tokenizer.IdToToken(*id));
  if (auto id = m.tokenizer.eos_id()) tokens.eos = std::string(m.tokenizer.IdToToken(*id));
  DQ_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::Parse(source, std::move(tokens)));
  m.chat_template = std::move(t);
  return absl::OkStatus();
}

absl::Status LoadFromGguf(Model& m) {
  const auto& gguf = static_cast<const GgufFile&>(*m.checkpoint);
  DQ_ASSIGN_OR_RETURN(m.config, ModelConfigFromGguf(gguf));
  DQ_ASSIGN_OR_RETURN(m.tokenizer, LoadTokenizerFromGguf(gguf));
  auto tmpl = gguf.GetString("tokenizer.chat_template");
  if (tmpl.ok()) DQ_RETURN_IF_ERROR(SetChatTemplate(*tmpl, m));
  return absl::OkStatus();
}

absl::Status LoadFromDir(Model& m) {
  const fs::path dir = fs::is_directory(m.path) ? fs::path(m.path) : fs::path(m.path).parent_path();
  DQ_ASSIGN_OR_RETURN(nlohmann::json config, ReadJson(dir / "config.json"));
  DQ_ASSIGN_OR_RETURN(m.config, ModelConfigFromHfJson(config));
  DQ_ASSIGN_OR_RETURN(m.tokenizer, LoadTokenizerFromDir(dir.string()));
  const std::string tmpl = DirChatTemplate(dir);
  if (!tmpl.empty()) DQ_RETURN_IF_ERROR(SetChatTemplate(tmpl, m));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& path) {
  auto m = std::make_unique<Model>();
  m->path = path;
  DQ_ASSIGN_OR_RETURN(m->checkpoint, OpenCheckpoint(path));
  absl::Status s = m->checkpoint->format() == "gguf" ? LoadFromGguf(*m) : LoadFromDir(*m);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("loading model ", path, ": ", s.message()));
  }
  if (m->tokenizer.vocab_size() > m->config.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("loading model ", path, ": the tokenizer has ", m->tokenizer.vocab_size(),
                     " tokens but the model's vocabulary is ", m->config.vocab_size));
  }
  if (m->config.eos_token_ids.empty() && m->tokenizer.eos_id()) {
    m->config.eos_token_ids.push_back(*m->tokenizer.eos_id());
  }
  return m;
}

}  // namespace dq
