// Tokenizer::FromHfJson: reads an HF tokenizers `tokenizer.json` into a TokenizerSpec.
#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/tokenizer/pre_tokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace dq {
namespace {

using nlohmann::json;

absl::Status Unsupported(const std::string& source, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      source, ": unsupported tokenizer: ", std::string(what),
      ". dqserve supports byte-level BPE tokenizers (GPT-2, SmolLM2, Qwen2/3, Llama 3 families) "
      "and SentencePiece-style BPE (Gemma, Llama 2, Mistral)"));
}

std::string TypeOf(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : std::string("?");
}

// A PCRE2 pattern matching `literal` verbatim.
std::string QuoteRegex(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/#&~ ").find(c) != std::string_view::npos) {
      out.push_back('\\');
    }
    out.push_back(c);
  }
  return out;
}

absl::Status ParseNormalizer(const json& j, const std::string& source, TokenizerSpec* spec) {
  if (j.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(j);
  if (type == "NFC") {
    spec->normalizer = Normalizer::kNfc;
    return absl::OkStatus();
  }
  if (type == "Sequence") {
    for (const json& child : j.at("normalizers")) {
      DQ_RETURN_IF_ERROR(ParseNormalizer(child, source, spec));
    }
    return absl::OkStatus();
  }
  return Unsupported(source, absl::StrCat("normalizer \"", type, "\" (only NFC is implemented)"));
}

// Appends the regexes of pre-tokenizer `j` to *regexes; *byte_level is set by ByteLevel, which
// must come last.
absl::Status ParsePreTokenizer(const json& j, const std::string& source,
                               std::vector<std::string>* regexes, bool* byte_level) {
  const std::string type = TypeOf(j);
  if (*byte_level) {
    return Unsupported(source, absl::StrCat("pre_tokenizer step \"", type, "\" after ByteLevel"));
  }
  if (type == "Sequence") {
    for (const json& child : j.at("pretokenizers")) {
      DQ_RETURN_IF_ERROR(ParsePreTokenizer(child, source, regexes, byte_level));
    }
  } else if (type == "ByteLevel") {
    if (j.value("add_prefix_space", false)) {
      return Unsupported(source, "pre_tokenizer ByteLevel with add_prefix_space=true");
    }
    if (j.value("use_regex", true)) regexes->emplace_back(tok_internal::kGpt2Regex);
    *byte_level = true;
  } else if (type == "Digits") {
    regexes->emplace_back(j.value("individual_digits", false) ? tok_internal::kDigitRegex
                                                              : tok_internal::kDigitsRegex);
  } else if (type == "Split") {
    const std::string behavior = j.value("behavior", std::string("?"));
    if (behavior != "Isolated" || j.value("invert", false)) {
      return Unsupported(source, absl::StrCat("pre_tokenizer Split with behavior \"", behavior,
                                              "\"", j.value("invert", false) ? ", invert" : "",
                                              " (only Isolated, not inverted)"));
    }
    const json& pattern = j.at("pattern");
    if (pattern.contains("Regex")) {
      regexes->push_back(pattern["Regex"].get<std::string>());
    } else {
      regexes->push_back(QuoteRegex(pattern.at("String").get<std::string>()));
    }
  } else {
    return Unsupported(source, absl::StrCat("pre_tokenizer \"", type, "\""));
  }
  return absl::OkStatus();
}

absl::Status CheckDecoder(const json& j, const std::string& source) {
  const std::string type = TypeOf(j);
  if (type == "ByteLevel") return absl::OkStatus();
  if (type == "Sequence" && j.contains("decoders") && j["decoders"].size() == 1) {
    return CheckDecoder(j["decoders"][0], source);
  }
  return Unsupported(source, absl::StrCat("decoder \"", type, "\" (only ByteLevel)"));
}

absl::Status CheckModelOptions(const json& model, const std::string& source, bool byte_level) {
  if (TypeOf(model) != "BPE") {
    return Unsupported(source, absl::StrCat("model.type \"", TypeOf(model), "\" (only BPE)"));
  }
  if (byte_level && model.value("byte_fallback", false)) {
    return Unsupported(source, "byte-level BPE (ByteLevel pre-tokenizer) with byte_fallback");
  }
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      model["dropout"].get<double>() != 0.0) {
    return Unsupported(source, "BPE with dropout");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      return Unsupported(source, absl::StrCat("BPE with ", key));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseModel(const json& model, const std::string& source, TokenizerSpec* spec) {
  DQ_RETURN_IF_ERROR(CheckModelOptions(model, source, spec->byte_level));
  if (!model.contains("vocab") || !model["vocab"].is_object() || !model.contains("merges") ||
      !model["merges"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": model.vocab must be an object and model.merges an array (a BPE model)"));
  }
  for (const auto& [token, id_json] : model.at("vocab").items()) {
    const int64_t id = id_json.get<int64_t>();
    if (id < 0 || id >= INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: vocab entry \"%s\" has invalid id %d", source, token, id));
    }
    if (static_cast<size_t>(id) >= spec->tokens.size()) spec->tokens.resize(id + 1);
    spec->tokens[id] = token;
  }
  for (const json& merge : model.at("merges")) {
    if (merge.is_string()) {
      DQ_ASSIGN_OR_RETURN(auto pair, SplitMergeLine(merge.get<std::string>()));
      spec->merges.push_back(std::move(pair));
    } else if (merge.is_array() && merge.size() == 2) {
      spec->merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      return absl::InvalidArgumentError(absl::StrCat(source, ": model.merges entry ", merge.dump(),
                                                     " is neither \"a b\" nor [\"a\", \"b\"]"));
    }
  }
  spec->ignore_merges = model.value("ignore_merges", false);
  spec->byte_fallback = !spec->byte_level && model.value("byte_fallback", false);
  spec->fuse_unk = model.value("fuse_unk", false);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const std::string unk = model["unk_token"].get<std::string>();
    for (size_t id = 0; id < spec->tokens.size(); ++id) {
      if (spec->tokens[id] == unk) spec->unk_id = static_cast<int32_t>(id);
    }
  }
  return absl::OkStatus();
}

absl::Status ParseAddedTokens(const json& list, const std::string& source, TokenizerSpec* spec) {
  for (const json& t : list) {
    AddedToken token;
    token.id = t.at("id").get<int32_t>();
    token.content = t.at("content").get<std::string>();
    token.special = t.value("special", false);
    token.lstrip = t.value("lstrip", false);
    token.rstrip = t.value("rstrip", false);
    if (t.value("single_word", false)) {
      return Unsupported(source,
                         absl::StrCat("added token \"", token.content, "\" with single_word"));
    }
    if (token.id < 0) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: added token \"%s\" has negative id %d",
                                                        source, token.content, token.id));
    }
    if (static_cast<size_t>(token.id) >= spec->tokens.size()) spec->tokens.resize(token.id + 1);
    if (spec->tokens[token.id].empty()) spec->tokens[token.id] = token.content;
    spec->added_tokens.push_back(std::move(token));
  }
  return absl::OkStatus();
}

PreTokenizer IdentifyPreTokenizer(const std::vector<std::string>& regexes) {
  using namespace tok_internal;  // NOLINT: the k*Regex constants.
  auto is = [&](std::initializer_list<std::string_view> want) {
    return std::equal(regexes.begin(), regexes.end(), want.begin(), want.end());
  };
  if (is({kGpt2Regex})) return PreTokenizer::kGpt2;
  if (is({kDigitRegex, kGpt2Regex})) return PreTokenizer::kSmolLM;
  if (is({kQwen2Regex})) return PreTokenizer::kQwen2;
  if (is({kLlama3Regex})) return PreTokenizer::kLlama3;
  return PreTokenizer::kCustom;
}

// --- SentencePiece-style pipelines (no ByteLevel step) ---

// A String pattern's literal; Regex patterns are not supported in these steps.
absl::StatusOr<std::string> LiteralPattern(const json& j, const std::string& source,
                                           std::string_view where) {
  const json pattern = j.value("pattern", json());
  if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
    return pattern["String"].get<std::string>();
  }
  const std::string dumped = pattern.dump();
  std::string what(where);
  absl::StrAppend(&what, " with pattern ", dumped, " (only {\"String\": ...} patterns)");
  return Unsupported(source, what);
}

absl::Status ParseSpmNormalizer(const json& j, const std::string& source, TokenizerSpec* spec) {
  if (j.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(j);
  NormalizerStep step;
  if (type == "Sequence") {
    for (const json& child : j.at("normalizers")) {
      DQ_RETURN_IF_ERROR(ParseSpmNormalizer(child, source, spec));
    }
    return absl::OkStatus();
  } else if (type == "NFC") {
    step.kind = NormalizerStep::Kind::kNfc;
  } else if (type == "Replace") {
    step.kind = NormalizerStep::Kind::kReplace;
    DQ_ASSIGN_OR_RETURN(step.pattern, LiteralPattern(j, source, "normalizer Replace"));
    step.content = j.at("content").get<std::string>();
  } else if (type == "Prepend") {
    step.kind = NormalizerStep::Kind::kPrepend;
    step.content = j.at("prepend").get<std::string>();
  } else {
    return Unsupported(source, absl::StrCat("normalizer \"", type,
                                            "\" (SentencePiece-style: NFC, Replace, Prepend)"));
  }
  spec->normalizer_steps.push_back(std::move(step));
  return absl::OkStatus();
}

absl::StatusOr<MetaspacePrepend> ParsePrependScheme(const json& j, const std::string& source) {
  if (!j.contains("prepend_scheme")) {  // tokenizers < 0.19: add_prefix_space.
    return j.value("add_prefix_space", true) ? MetaspacePrepend::kAlways : MetaspacePrepend::kNever;
  }
  const std::string scheme = j["prepend_scheme"].get<std::string>();
  if (scheme == "always") return MetaspacePrepend::kAlways;
  if (scheme == "first") return MetaspacePrepend::kFirst;
  if (scheme == "never") return MetaspacePrepend::kNever;
  return Unsupported(source, absl::StrCat("Metaspace prepend_scheme \"", scheme, "\""));
}

absl::Status ParseSpmPreTokenizer(const json& j, const std::string& source, TokenizerSpec* spec) {
  if (j.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    for (const json& child : j.at("pretokenizers")) {
      DQ_RETURN_IF_ERROR(ParseSpmPreTokenizer(child, source, spec));
    }
    return absl::OkStatus();
  }
  PreTokenizerStep step;
  if (type == "Metaspace") {
    step.kind = PreTokenizerStep::Kind::kMetaspace;
    step.replacement = j.value("replacement", std::string("\u2581"));
    DQ_ASSIGN_OR_RETURN(step.prepend, ParsePrependScheme(j, source));
    step.split = j.value("split", true);
    spec->pre_tokenizer_steps.push_back(std::move(step));
    return absl::OkStatus();
  }
  if (type != "Split" && type != "Digits") {
    return Unsupported(source, absl::StrCat("pre_tokenizer \"", type,
                                            "\" (SentencePiece-style: Metaspace, Split, Digits)"));
  }
  std::vector<std::string> regexes;
  bool byte_level = false;
  DQ_RETURN_IF_ERROR(ParsePreTokenizer(j, source, &regexes, &byte_level));
  for (std::string& regex : regexes) {
    step.kind = PreTokenizerStep::Kind::kRegex;
    step.regex = std::move(regex);
    spec->pre_tokenizer_steps.push_back(step);
  }
  return absl::OkStatus();
}

absl::Status ParseSpmDecoder(const json& j, const std::string& source, TokenizerSpec* spec) {
  const std::string type = TypeOf(j);
  DecoderStep step;
  if (type == "Sequence") {
    for (const json& child : j.at("decoders")) {
      DQ_RETURN_IF_ERROR(ParseSpmDecoder(child, source, spec));
    }
    return absl::OkStatus();
  } else if (type == "Replace") {
    step.kind = DecoderStep::Kind::kReplace;
    DQ_ASSIGN_OR_RETURN(step.pattern, LiteralPattern(j, source, "decoder Replace"));
    step.content = j.at("content").get<std::string>();
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecoderStep::Kind::kFuse;
  } else if (type == "Strip") {
    step.kind = DecoderStep::Kind::kStrip;
    step.content = j.at("content").get<std::string>();
    step.start = j.value("start", 0);
    step.stop = j.value("stop", 0);
  } else if (type == "ByteLevel") {
    return Unsupported(
        source,
        "decoder ByteLevel but the pre_tokenizer has no ByteLevel step (a byte-level "
        "BPE needs both)");
  } else if (type == "Metaspace") {
    step.kind = DecoderStep::Kind::kMetaspace;
    step.pattern = j.value("replacement", std::string("\u2581"));
    DQ_ASSIGN_OR_RETURN(step.prepend, ParsePrependScheme(j, source));
  } else {
    return Unsupported(source,
                       absl::StrCat("decoder \"", type,
                                    "\" (SentencePiece-style: Replace, ByteFallback, Fuse, Strip, "
                                    "Metaspace, Sequence)"));
  }
  spec->decoder_steps.push_back(std::move(step));
  return absl::OkStatus();
}

// True when pre-tokenizer `j` has a ByteLevel step (a byte-level BPE tokenizer).
bool HasByteLevel(const json& j) {
  if (TypeOf(j) == "ByteLevel") return true;
  if (TypeOf(j) != "Sequence" || !j.contains("pretokenizers")) return false;
  return std::any_of(j["pretokenizers"].begin(), j["pretokenizers"].end(), HasByteLevel);
}

absl::StatusOr<TokenizerSpec> ParseSpec(const json& root, const std::string& source) {
  TokenizerSpec spec;
  if (!root.is_object() || !root.contains("model")) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not an HF tokenizer.json (no \"model\" object)"));
  }
  const json pre = root.value("pre_tokenizer", json());
  spec.byte_level = HasByteLevel(pre);
  DQ_RETURN_IF_ERROR(ParseModel(root["model"], source, &spec));
  if (spec.byte_level) {
    DQ_RETURN_IF_ERROR(ParseNormalizer(root.value("normalizer", json()), source, &spec));
    bool byte_level = false;
    DQ_RETURN_IF_ERROR(ParsePreTokenizer(pre, source, &spec.pre_tokenizer_regexes, &byte_level));
    DQ_RETURN_IF_ERROR(CheckDecoder(root.value("decoder", json()), source));
    spec.pre_tokenizer = IdentifyPreTokenizer(spec.pre_tokenizer_regexes);
  } else {
    DQ_RETURN_IF_ERROR(ParseSpmNormalizer(root.value("normalizer", json()), source, &spec));
    DQ_RETURN_IF_ERROR(ParseSpmPreTokenizer(pre, source, &spec));
    DQ_RETURN_IF_ERROR(ParseSpmDecoder(root.value("decoder", json()), source, &spec));
    spec.pre_tokenizer = PreTokenizer::kCustom;
  }
  DQ_RETURN_IF_ERROR(ParseAddedTokens(root.value("added_tokens", json::array()), source, &spec));
  return spec;
}

}  // namespace

absl::StatusOr<Tokenizer> Tokenizer::FromHfJsonString(std::string_view text,
                                                      std::string_view source_name) {
  const std::string source(source_name);
  TokenizerSpec spec;
  try {
    const json root = json::parse(text);
    DQ_ASSIGN_OR_RETURN(spec, ParseSpec(root, source));
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": malformed tokenizer.json: ", e.what()));
  }
  absl::StatusOr<Tokenizer> tokenizer = FromSpec(std::move(spec));
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat(source, ": ", std::string(tokenizer.status().message())));
  }
  return tokenizer;
}

absl::StatusOr<Tokenizer> Tokenizer::FromHfJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot open tokenizer file ", path, ": check that the path exists"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return FromHfJsonString(buffer.str(), path);
}

}  // namespace dq
