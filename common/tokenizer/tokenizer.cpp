#include "common/tokenizer/tokenizer.h"

#include <algorithm>
#include <map>

#include "common/tokenizer/added_tokens.h"
#include "common/tokenizer/bpe.h"
#include "common/tokenizer/pre_tokenizer.h"
#include "common/tokenizer/spm_pipeline.h"
#include "common/tokenizer/spm_score.h"
#include "common/tokenizer/unicode_nfc.h"
#include "common/tokenizer/utf8.h"

namespace dq {

using tok_internal::AddedTokenEntry;
using tok_internal::AddedTokenMatcher;
using tok_internal::BpeModel;
using tok_internal::RegexChain;
using tok_internal::Segment;
using tok_internal::SpmDecoder;
using tok_internal::SpmPreTokenizer;
using tok_internal::SpmScoreModel;
using tok_internal::TokenIdMap;

namespace {

constexpr uint8_t kAdded = 1;
constexpr uint8_t kSpecial = 2;

std::vector<std::string> RegexesFor(const TokenizerSpec& spec) {
  switch (spec.pre_tokenizer) {
    case PreTokenizer::kGpt2:
      return {std::string(tok_internal::kGpt2Regex)};
    case PreTokenizer::kSmolLM:
      return {std::string(tok_internal::kDigitRegex), std::string(tok_internal::kGpt2Regex)};
    case PreTokenizer::kQwen2:
      return {std::string(tok_internal::kQwen2Regex)};
    case PreTokenizer::kLlama3:
      return {std::string(tok_internal::kLlama3Regex)};
    case PreTokenizer::kCustom:
      break;
  }
  return spec.pre_tokenizer_regexes;
}

absl::Status CheckId(std::optional<int32_t> id, size_t n, std::string_view what) {
  if (id.has_value() && (*id < 0 || static_cast<size_t>(*id) >= n)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s id %d is outside the vocabulary (size %d); fix the tokenizer metadata", what, *id, n));
  }
  return absl::OkStatus();
}

// `ranges` clipped to [0, size), without empty ones, sorted and merged where they overlap or
// touch: the form AddedTokenMatcher::Split needs.
std::vector<TextRange> CanonicalRanges(std::span<const TextRange> ranges, size_t size) {
  std::vector<TextRange> out;
  for (TextRange r : ranges) {
    r.end = std::min(r.end, size);
    if (r.begin < r.end) out.push_back(r);
  }
  std::sort(out.begin(), out.end(),
            [](const TextRange& a, const TextRange& b) { return a.begin < b.begin; });
  size_t kept = 0;
  for (const TextRange& r : out) {
    if (kept > 0 && r.begin <= out[kept - 1].end) {
      out[kept - 1].end = std::max(out[kept - 1].end, r.end);
    } else {
      out[kept++] = r;
    }
  }
  out.resize(kept);
  return out;
}

// Replaces ill-formed UTF-8 in `text` as Encode does, but piece by piece between the range
// boundaries, moving the (canonical) ranges so they still cover the same characters.
std::string Utf8LossyKeepingRanges(std::string_view text, std::vector<TextRange>* ranges) {
  std::string out;
  size_t at = 0;
  for (TextRange& r : *ranges) {
    tok_internal::AppendUtf8Lossy(text.substr(at, r.begin - at), &out);
    const size_t begin = out.size();
    tok_internal::AppendUtf8Lossy(text.substr(r.begin, r.end - r.begin), &out);
    at = r.end;
    r = {begin, out.size()};
  }
  tok_internal::AppendUtf8Lossy(text.substr(at), &out);
  return out;
}

// The added tokens of `spec`: from token_types, then the explicit list (which wins).
absl::StatusOr<std::map<int32_t, AddedToken>> CollectAddedTokens(const TokenizerSpec& spec) {
  const size_t n = spec.tokens.size();
  if (!spec.token_types.empty() && spec.token_types.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tokenizer has %d token types for %d tokens; they must be the same length",
                        spec.token_types.size(), n));
  }
  std::map<int32_t, AddedToken> added;
  for (size_t id = 0; id < spec.token_types.size(); ++id) {
    const auto type = static_cast<GgufTokenType>(spec.token_types[id]);
    if (type != GgufTokenType::kControl && type != GgufTokenType::kUnknown &&
        type != GgufTokenType::kUserDefined) {
      continue;
    }
    if (spec.tokens[id].empty()) continue;
    const auto i = static_cast<int32_t>(id);
    added[i] = {i, spec.tokens[id], type != GgufTokenType::kUserDefined, false, false};
  }
  for (const AddedToken& token : spec.added_tokens) {
    DQ_RETURN_IF_ERROR(CheckId(token.id, n, absl::StrCat("added token \"", token.content, "\"")));
    if (token.content.empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("added token %d has empty content; remove it", token.id));
    }
    added[token.id] = token;
  }
  return added;
}

}  // namespace

struct Tokenizer::Impl {
  std::vector<std::string> tokens;
  std::vector<std::string> decoded;  // Bytes each id decodes to.
  std::vector<uint8_t> flags;        // kAdded | kSpecial.
  TokenIdMap token_to_id;
  BpeModel bpe;
  RegexChain pre;
  AddedTokenMatcher all_added;          // parse_special = true; EncodeSpecialOutside.
  AddedTokenMatcher non_special_added;  // parse_special = false.
  PreTokenizer pre_type = PreTokenizer::kGpt2;
  Normalizer normalizer = Normalizer::kNone;
  bool ignore_merges = false;
  // SentencePiece-style (byte_level false).
  bool byte_level = true;
  std::vector<NormalizerStep> normalizer_steps;
  SpmPreTokenizer spm_pre;
  SpmDecoder decoder;
  std::optional<SpmScoreModel> spm_score;  // GGUF "llama": merges by score instead of bpe.
  std::vector<std::string> first_decoded;  // FirstTokenBytes (Metaspace decoders), else empty.

  void EncodePlain(std::string_view text, std::vector<std::string_view>* pieces,
                   std::vector<int32_t>* ids) const;
  // `at_start`: the segment begins the text.
  void EncodeSpm(std::string_view text, bool at_start, std::vector<int32_t>* ids) const;
  std::string DecodeSpm(std::span<const int32_t> ids, bool skip_special) const;
  // The model and pipeline of a SentencePiece-style spec (after token_to_id is filled).
  absl::Status BuildSpm(TokenizerSpec& spec);
  // decoded (and first_decoded) from tokens.
  void FillDecoded();
  // `text` is valid UTF-8; `no_special` is canonical (CanonicalRanges).
  std::vector<int32_t> EncodeValid(std::string_view text, const AddedTokenMatcher& added,
                                   std::span<const TextRange> no_special) const;
};

std::vector<int32_t> Tokenizer::Impl::EncodeValid(std::string_view text,
                                                  const AddedTokenMatcher& added,
                                                  std::span<const TextRange> no_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  std::vector<Segment> segments;
  added.Split(text, no_special, &segments);
  std::vector<std::string_view> pieces;
  for (const Segment& segment : segments) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
    } else if (byte_level) {
      EncodePlain(segment.text, &pieces, &ids);
    } else {
      EncodeSpm(segment.text, segment.text.data() == text.data(), &ids);
    }
  }
  return ids;
}

void Tokenizer::Impl::EncodePlain(std::string_view text, std::vector<std::string_view>* pieces,
                                  std::vector<int32_t>* ids) const {
  std::string normalized;
  if (normalizer == Normalizer::kNfc && !tok_internal::IsNfcQuick(text)) {
    normalized = tok_internal::NfcNormalize(text);
    text = normalized;
  }
  pieces->clear();
  pre.Split(text, pieces);
  std::string mapped;
  for (std::string_view piece : *pieces) {
    if (ignore_merges) {
      mapped.clear();
      tok_internal::AppendByteLevel(piece, &mapped);
      auto it = token_to_id.find(mapped);
      if (it != token_to_id.end()) {
        ids->push_back(it->second);
        continue;
      }
    }
    bpe.Encode(piece, ids);
  }
}

void Tokenizer::Impl::EncodeSpm(std::string_view text, bool at_start,
                                std::vector<int32_t>* ids) const {
  const std::string normalized = tok_internal::Normalize(normalizer_steps, text);
  std::vector<std::string> pieces;
  spm_pre.Split(normalized, at_start, &pieces);
  for (const std::string& piece : pieces) {
    if (spm_score) {
      spm_score->Encode(piece, ids);
      continue;
    }
    if (ignore_merges) {
      if (auto it = token_to_id.find(piece); it != token_to_id.end()) {
        ids->push_back(it->second);
        continue;
      }
    }
    bpe.Encode(piece, ids);
  }
}

std::string Tokenizer::Impl::DecodeSpm(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> strings;
  strings.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= tokens.size()) continue;
    if (skip_special && (flags[id] & kSpecial) != 0) continue;
    strings.push_back(tokens[id]);
  }
  return decoder.Decode(std::move(strings));
}

absl::Status Tokenizer::Impl::BuildSpm(TokenizerSpec& spec) {
  Impl* impl = this;
  impl->byte_level = false;
  if (!spec.scores.empty()) {
    DQ_ASSIGN_OR_RETURN(SpmScoreModel model, SpmScoreModel::Build(spec.tokens, spec.scores,
                                                                  spec.token_types, spec.unk_id));
    impl->spm_score = std::move(model);
  } else {
    DQ_ASSIGN_OR_RETURN(impl->bpe,
                        BpeModel::BuildCharLevel(impl->token_to_id, spec.merges, spec.unk_id,
                                                 spec.byte_fallback, spec.fuse_unk));
  }
  DQ_ASSIGN_OR_RETURN(impl->spm_pre, SpmPreTokenizer::Build(std::move(spec.pre_tokenizer_steps)));
  DQ_ASSIGN_OR_RETURN(impl->decoder, SpmDecoder::Build(std::move(spec.decoder_steps)));
  impl->normalizer_steps = std::move(spec.normalizer_steps);
  return absl::OkStatus();
}

void Tokenizer::Impl::FillDecoded() {
  Impl* impl = this;
  const size_t n = impl->tokens.size();
  impl->decoded.reserve(n);
  if (impl->byte_level) {
    for (const std::string& token : impl->tokens) {
      impl->decoded.push_back(tok_internal::ByteLevelDecodeToken(token));
    }
    return;
  }
  bool first_differs = false;
  std::vector<std::string> first;
  first.reserve(n);
  for (const std::string& token : impl->tokens) {
    impl->decoded.push_back(impl->decoder.StreamBytes(token, /*first=*/false));
    first.push_back(impl->decoder.StreamBytes(token, /*first=*/true));
    first_differs = first_differs || first.back() != impl->decoded.back();
  }
  if (first_differs) impl->first_decoded = std::move(first);
}

absl::StatusOr<Tokenizer> Tokenizer::FromSpec(TokenizerSpec spec) {
  const size_t n = spec.tokens.size();
  if (n == 0) return absl::InvalidArgumentError("tokenizer has no tokens; the vocabulary is empty");
  if (n > static_cast<size_t>(INT32_MAX)) return absl::InvalidArgumentError("vocabulary too big");
  DQ_RETURN_IF_ERROR(CheckId(spec.bos_id, n, "BOS"));
  DQ_RETURN_IF_ERROR(CheckId(spec.eos_id, n, "EOS"));
  DQ_RETURN_IF_ERROR(CheckId(spec.unk_id, n, "unknown-token"));
  DQ_ASSIGN_OR_RETURN(auto added, CollectAddedTokens(spec));

  auto impl = std::make_shared<Impl>();
  impl->token_to_id.reserve(n + added.size());
  for (size_t id = 0; id < n; ++id) {
    if (!spec.tokens[id].empty()) {
      impl->token_to_id.emplace(spec.tokens[id], static_cast<int32_t>(id));
    }
  }
  if (spec.byte_level) {
    DQ_ASSIGN_OR_RETURN(impl->bpe, BpeModel::Build(impl->token_to_id, spec.merges, spec.unk_id));
    DQ_ASSIGN_OR_RETURN(impl->pre, RegexChain::Compile(RegexesFor(spec)));
  } else {
    DQ_RETURN_IF_ERROR(impl->BuildSpm(spec));
  }

  impl->tokens = std::move(spec.tokens);
  impl->flags.assign(n, 0);
  std::vector<AddedTokenEntry> all, non_special;
  for (const auto& [id, token] : added) {
    impl->tokens[id] = token.content;
    impl->token_to_id[token.content] = id;
    impl->flags[id] = kAdded | (token.special ? kSpecial : 0);
    AddedTokenEntry entry{id, token.content, token.lstrip, token.rstrip, token.special};
    all.push_back(entry);
    if (!token.special) non_special.push_back(std::move(entry));
  }
  impl->all_added = AddedTokenMatcher(std::move(all));
  impl->non_special_added = AddedTokenMatcher(std::move(non_special));
  impl->FillDecoded();
  impl->pre_type = spec.pre_tokenizer;
  impl->normalizer = spec.normalizer;
  impl->ignore_merges = spec.ignore_merges;
  Tokenizer tokenizer(std::move(impl));
  tokenizer.bos_id_ = spec.bos_id;
  tokenizer.eos_id_ = spec.eos_id;
  return tokenizer;
}

Tokenizer::Tokenizer() {
  static const auto* empty = new std::shared_ptr<const Impl>(std::make_shared<Impl>());
  impl_ = *empty;
}

Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool parse_special) const {
  if (impl_->tokens.empty()) return {};
  std::string clean;
  if (!tok_internal::IsValidUtf8(text)) {
    tok_internal::AppendUtf8Lossy(text, &clean);
    text = clean;
  }
  return impl_->EncodeValid(text, parse_special ? impl_->all_added : impl_->non_special_added, {});
}

std::vector<int32_t> Tokenizer::EncodeSpecialOutside(std::string_view text,
                                                     std::span<const TextRange> no_special) const {
  if (impl_->tokens.empty()) return {};
  std::vector<TextRange> ranges = CanonicalRanges(no_special, text.size());
  std::string clean;
  if (!tok_internal::IsValidUtf8(text)) {
    clean = Utf8LossyKeepingRanges(text, &ranges);
    text = clean;
  }
  return impl_->EncodeValid(text, impl_->all_added, ranges);
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  if (!impl_->byte_level) return impl_->DecodeSpm(ids, skip_special);
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special && (impl_->flags[id] & kSpecial) != 0) continue;
    bytes.append(impl_->decoded[id]);
  }
  std::string text;
  text.reserve(bytes.size());
  tok_internal::AppendUtf8Lossy(bytes, &text);
  return text;
}

std::string_view Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return impl_->decoded[id];
}

std::string_view Tokenizer::FirstTokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return impl_->first_decoded.empty() ? impl_->decoded[id] : impl_->first_decoded[id];
}

int Tokenizer::strip_start() const { return impl_->decoder.strip_start(); }
std::string_view Tokenizer::strip_content() const { return impl_->decoder.strip_content(); }
bool Tokenizer::byte_level() const { return impl_->byte_level; }

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->tokens.size()); }

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  auto it = impl_->token_to_id.find(token);
  if (it == impl_->token_to_id.end()) return std::nullopt;
  return it->second;
}

std::string_view Tokenizer::IdToToken(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return impl_->tokens[id];
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && (impl_->flags[id] & kSpecial) != 0;
}

bool Tokenizer::IsAdded(int32_t id) const {
  return id >= 0 && id < vocab_size() && (impl_->flags[id] & kAdded) != 0;
}

absl::Status Tokenizer::SetBosEos(std::optional<int32_t> bos_id, std::optional<int32_t> eos_id) {
  const auto n = static_cast<size_t>(vocab_size());
  DQ_RETURN_IF_ERROR(CheckId(bos_id, n, "BOS"));
  DQ_RETURN_IF_ERROR(CheckId(eos_id, n, "EOS"));
  bos_id_ = bos_id;
  eos_id_ = eos_id;
  return absl::OkStatus();
}

PreTokenizer Tokenizer::pre_tokenizer() const { return impl_->pre_type; }
Normalizer Tokenizer::normalizer() const { return impl_->normalizer; }

std::string_view PreTokenizerName(PreTokenizer pre) {
  switch (pre) {
    case PreTokenizer::kGpt2:
      return "gpt2";
    case PreTokenizer::kSmolLM:
      return "smollm";
    case PreTokenizer::kQwen2:
      return "qwen2";
    case PreTokenizer::kLlama3:
      return "llama3";
    case PreTokenizer::kCustom:
      return "custom";
  }
  return "unknown";
}

absl::StatusOr<std::pair<std::string, std::string>> SplitMergeLine(std::string_view line) {
  const size_t space = line.size() > 1 ? line.find(' ', 1) : std::string_view::npos;
  if (space == std::string_view::npos || space + 1 >= line.size() ||
      line.find(' ', space + 1) != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrFormat("BPE merge \"%s\" is not two tokens separated by one space", line));
  }
  return std::make_pair(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
}

}  // namespace dq
