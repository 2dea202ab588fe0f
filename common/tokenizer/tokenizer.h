// Byte-level BPE tokenizer (GPT-2 family: SmolLM2, Qwen2/2.5/3, Llama 3, GPT-2) and
// SentencePiece-style BPE with byte fallback (Gemma, Llama 2, Mistral: "▁" for spaces, <0xNN>
// byte tokens), built from an HF tokenizer.json or from GGUF-style vocabulary data, matching HF
// `tokenizers` exactly (GGUF "llama" vocabularies: llama.cpp's score-ordered SPM merging).
//
// Encoding: added tokens are split out first (leftmost, then longest match), the text between
// them is normalized (NFC for Qwen2), split by the pre-tokenizer's regex chain, and every piece
// is BPE-merged over its GPT-2 byte-level symbols. No BOS/EOS is added: callers (the chat
// template) decide that. Decoding maps byte-level symbols back to bytes and replaces ill-formed
// UTF-8 with U+FFFD, as HF's ByteLevel decoder does.
//
// A Tokenizer is cheap to copy (its tables are shared and immutable) and safe to use from many
// threads at once.
//
// Not modelled: a tokenizer.json post_processor (BOS/EOS templates; ignored), added tokens'
// `normalized` flag (all are matched on the raw text; identical unless a token's content changes
// under NFC), single_word added tokens and models other than BPE (load errors).
//
// SentencePiece-style (TokenizerSpec::byte_level false): each text segment between added tokens
// goes through the normalizer steps, then the pre-tokenizer steps (none: the segment is one
// piece), then char-level BPE with byte fallback; Decode runs HF's decoder chain on the token
// strings. Streaming (IncrementalDetokenizer) equals Decode except where a run of <0xNN> tokens
// is not valid UTF-8 (streamed: U+FFFD per maximal ill-formed part; HF: U+FFFD per byte token,
// and the run's valid characters are lost too) and for a Strip decoder's `stop` (not applied).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/text_range.h"

namespace dq {

// The pre-tokenizer's regex chain, by model family.
enum class PreTokenizer {
  kGpt2,    // GPT-2 ByteLevel regex (HF ByteLevel use_regex=true). GGUF "gpt-2".
  kSmolLM,  // Every digit alone, then the GPT-2 regex (HF Sequence[Digits(individual_digits),
            // ByteLevel]). GGUF "smollm", "starcoder".
  kQwen2,   // Qwen2 regex (HF Split + ByteLevel(use_regex=false)). GGUF "qwen2".
  kLlama3,  // Llama 3 regex (digits in groups of <= 3). GGUF "llama-bpe".
  kCustom,  // TokenizerSpec::pre_tokenizer_regexes (what a tokenizer.json specified).
};
std::string_view PreTokenizerName(PreTokenizer pre);

enum class Normalizer {
  kNone,
  kNfc,  // Unicode NFC (Qwen2-family tokenizer.json files).
};

// GGUF tokenizer.ggml.token_type values.
enum class GgufTokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// A token matched verbatim in text before BPE (HF "added token").
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special =
      true;  // Special tokens: skippable in Decode, and parse_special=false ignores them.
  bool lstrip = false;  // Also swallows the whitespace before it.
  bool rstrip = false;  // Also swallows the whitespace after it.
};

// SentencePiece-style pipeline steps (TokenizerSpec::byte_level false), as HF tokenizers
// defines them.
enum class MetaspacePrepend { kAlways, kFirst, kNever };

struct NormalizerStep {
  enum class Kind { kNfc, kReplace, kPrepend };
  Kind kind = Kind::kNfc;
  std::string pattern;  // kReplace: the literal string replaced (every occurrence).
  std::string content;  // kReplace: its replacement; kPrepend: the prefix (non-empty text only).
};

struct PreTokenizerStep {
  enum class Kind { kMetaspace, kRegex };
  Kind kind = Kind::kMetaspace;
  std::string replacement = "\u2581";                    // kMetaspace.
  MetaspacePrepend prepend = MetaspacePrepend::kAlways;  // kMetaspace.
  bool split = true;  // kMetaspace: split before every replacement character.
  std::string regex;  // kRegex: HF Split(Isolated) by this PCRE2 pattern.
};

struct DecoderStep {
  enum class Kind { kReplace, kByteFallback, kFuse, kStrip, kMetaspace };
  Kind kind = Kind::kFuse;
  std::string pattern;  // kReplace: literal replaced; kMetaspace: the replacement character.
  std::string content;  // kReplace: its replacement; kStrip: the character stripped.
  int start = 0;        // kStrip: at most this many `content` characters off the front...
  int stop = 0;         // ...and off the back (of each token: put Fuse before Strip).
  MetaspacePrepend prepend = MetaspacePrepend::kAlways;  // kMetaspace.
};

struct TokenizerSpec {
  // id -> token, byte-level encoded as in GGUF / tokenizer.json ("Ġthe"); "" for an unused id.
  std::vector<std::string> tokens;
  // BPE merges, best (rank 0) first.
  std::vector<std::pair<std::string, std::string>> merges;
  // GGUF token types per id, or empty (all normal). kControl and kUnknown make a special added
  // token, kUserDefined a non-special one.
  std::vector<int32_t> token_types;
  // More added tokens; these win over token_types for the same id.
  std::vector<AddedToken> added_tokens;
  PreTokenizer pre_tokenizer = PreTokenizer::kGpt2;
  std::vector<std::string> pre_tokenizer_regexes;  // kCustom only: applied in order.
  Normalizer normalizer = Normalizer::kNone;
  // Llama 3 style: a piece that is itself a token is emitted whole, without merging.
  bool ignore_merges = false;
  std::optional<int32_t> unk_id;  // For bytes missing from the vocabulary (else dropped).
  // false: SentencePiece-style (char-level BPE, the *_steps below; pre_tokenizer, normalizer and
  // pre_tokenizer_regexes unused).
  bool byte_level = true;
  bool byte_fallback = false;  // A character not in the vocabulary becomes <0xNN> tokens.
  bool fuse_unk = false;       // Consecutive unknown characters make one unk token.
  std::vector<NormalizerStep> normalizer_steps;
  std::vector<PreTokenizerStep> pre_tokenizer_steps;
  std::vector<DecoderStep> decoder_steps;
  // Non-empty (one per token; byte_level false): llama.cpp's SentencePiece merging (GGUF
  // tokenizer.ggml.model "llama"): adjacent symbols merge while their concatenation is a token,
  // the highest score first; `merges` is unused. Byte tokens are token_types kByte.
  std::vector<float> scores;
  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
};

// Splits a GGUF / HF merges line "a b" into its two parts.
absl::StatusOr<std::pair<std::string, std::string>> SplitMergeLine(std::string_view line);

class Tokenizer {
 public:
  // Loads an HF tokenizer.json (model.type "BPE" with a ByteLevel decoder). Unsupported
  // models, normalizers, pre-tokenizers or decoders are errors that name the field.
  static absl::StatusOr<Tokenizer> FromHfJson(const std::string& path);
  // Same, from the file's contents; `source` names it in errors.
  static absl::StatusOr<Tokenizer> FromHfJsonString(std::string_view json,
                                                    std::string_view source = "tokenizer.json");
  static absl::StatusOr<Tokenizer> FromSpec(TokenizerSpec spec);

  // An empty tokenizer (vocab_size() 0; Encode and Decode return nothing) to assign to later.
  Tokenizer();
  // Copies share the immutable tables. (No move operations: a moved-from Tokenizer stays
  // usable because moving copies.)
  Tokenizer(const Tokenizer&) = default;
  Tokenizer& operator=(const Tokenizer&) = default;
  ~Tokenizer();

  // Token ids of `text`. With parse_special=false, special tokens written in the text are
  // tokenized as ordinary text (use it for untrusted user input); non-special added tokens are
  // still matched, as HF's encode_special_tokens does. Ill-formed UTF-8 in `text` is first
  // replaced by U+FFFD.
  std::vector<int32_t> Encode(std::string_view text, bool parse_special = true) const;

  // Token ids of `text` with special tokens parsed only outside the byte ranges `no_special`
  // (e.g. a chat prompt whose message content is untrusted): outside them the result is
  // Encode(text, true)'s, inside them special-token text is ordinary text, as in
  // Encode(text, false) (non-special added tokens still match). A special token whose text would
  // overlap a range is not taken, and a special token's lstrip/rstrip stops at a range (that
  // whitespace stays the range's text). Ranges may be in any order, overlap, or reach past the
  // text (they are clipped); they should start and end on character boundaries.
  std::vector<int32_t> EncodeSpecialOutside(std::string_view text,
                                            std::span<const TextRange> no_special) const;

  // Text of `ids`; ids out of range are skipped, special tokens too when skip_special.
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The raw bytes `id` contributes to decoded text (possibly part of a UTF-8 sequence); empty
  // for an id out of range.
  std::string_view TokenBytes(int32_t id) const;
  // The same when `id` is the first token decoded (differs for a Metaspace decoder, which drops
  // the first token's "▁").
  std::string_view FirstTokenBytes(int32_t id) const;
  // A Strip decoder after Fuse removes up to strip_start() leading strip_content() characters
  // from the decoded text (Llama 2's leading space); 0 when there is none.
  int strip_start() const;
  std::string_view strip_content() const;
  bool byte_level() const;

  int32_t vocab_size() const;
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token's string as stored ("Ġthe", "<|im_start|>"); empty for an id out of range.
  std::string_view IdToToken(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // True for every added token, special or not.
  bool IsAdded(int32_t id) const;

  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  // Replaces the BOS/EOS ids; an id outside the vocabulary is an error.
  absl::Status SetBosEos(std::optional<int32_t> bos_id, std::optional<int32_t> eos_id);

  PreTokenizer pre_tokenizer() const;
  Normalizer normalizer() const;

 private:
  struct Impl;
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

  std::shared_ptr<const Impl> impl_;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
};

}  // namespace dq
