// dq-tool tokenize / detokenize: a model's tokenizer from the command line.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/model/model_loader.h"
#include "tools/dq_tool/commands.h"

namespace dq::tool {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  std::string file;
  std::string ids;
  bool no_special = false;
};

absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& path) { return LoadModel(path); }

absl::Status Tokenize(const TokenizeOptions& o) {
  std::string text = o.text;
  if (!o.file.empty()) {
    std::ifstream f(o.file, std::ios::binary);
    if (!f) return absl::NotFoundError("cannot read " + o.file);
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  }
  DQ_ASSIGN_OR_RETURN(auto model, Load(o.model));
  const std::vector<int32_t> ids = model->tokenizer.Encode(text, !o.no_special);
  std::cout << nlohmann::json(ids).dump() << "\n";
  return absl::OkStatus();
}

absl::Status Detokenize(const TokenizeOptions& o) {
  const nlohmann::json j = nlohmann::json::parse(o.ids, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) {
    return absl::InvalidArgumentError("--ids must be a JSON array of integers, e.g. [1, 2, 3]");
  }
  std::vector<int32_t> ids;
  for (const auto& v : j) {
    if (!v.is_number_integer()) {
      return absl::InvalidArgumentError("--ids must contain only integers");
    }
    ids.push_back(v.get<int32_t>());
  }
  DQ_ASSIGN_OR_RETURN(auto model, Load(o.model));
  for (int32_t id : ids) {
    if (id < 0 || id >= model->tokenizer.vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is not in [0, ", model->tokenizer.vocab_size(), ")"));
    }
  }
  std::cout << model->tokenizer.Decode(ids) << "\n";
  return absl::OkStatus();
}

void Report(const absl::Status& s, int* exit_code) {
  if (!s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    *exit_code = 1;
  }
}

}  // namespace

void RegisterTokenize(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* tok = app.add_subcommand("tokenize", "print a text's token ids as a JSON array");
  tok->add_option("--model", o->model, "a .gguf file or a HF checkpoint directory")->required();
  auto* text = tok->add_option("--text", o->text, "the text");
  auto* file = tok->add_option("--file", o->file, "read the text from this file");
  text->excludes(file);
  tok->add_flag("--no-special", o->no_special, "treat special-token text as plain text");
  tok->callback([o, exit_code] { Report(Tokenize(*o), exit_code); });

  CLI::App* detok = app.add_subcommand("detokenize", "print the text of a JSON array of ids");
  detok->add_option("--model", o->model, "a .gguf file or a HF checkpoint directory")->required();
  detok->add_option("--ids", o->ids, "JSON array of token ids")->required();
  detok->callback([o, exit_code] { Report(Detokenize(*o), exit_code); });
}

}  // namespace dq::tool
