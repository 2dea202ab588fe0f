// BPE merging, the lowest rank first and, among equal ranks, the leftmost (HF tokenizers'
// BPE::merge_word). Byte-level (GPT-2): raw bytes -> GPT-2 mapped symbols -> merges. Char-level
// (SentencePiece-style BPE): UTF-8 characters -> merges; a character missing from the vocabulary
// becomes its bytes' <0xNN> tokens (byte_fallback), else <unk> (fused with a neighbouring <unk>
// under fuse_unk), else is dropped.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"

namespace dq::tok_internal {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
// token string -> id, with std::string_view lookups.
using TokenIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `vocab` maps byte-level token strings to ids; `merges` are in rank order. A merge whose
  // parts or result are not in the vocabulary is an error, as in HF tokenizers. Bytes whose
  // symbol is missing from the vocabulary become `unk_id` or are dropped.
  static absl::StatusOr<BpeModel> Build(
      const TokenIdMap& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
      std::optional<int32_t> unk_id);

  // The char-level model (see the file comment). Byte tokens are looked up as "<0xNN>".
  static absl::StatusOr<BpeModel> BuildCharLevel(
      const TokenIdMap& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
      std::optional<int32_t> unk_id, bool byte_fallback, bool fuse_unk);

  // Appends the ids of one pre-tokenized piece of raw bytes. Thread-safe; results of short
  // pieces are cached.
  void Encode(std::string_view piece, std::vector<int32_t>* out) const;

  size_t num_merges() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  struct Cache;

  absl::Status AddMerges(const TokenIdMap& vocab,
                         const std::vector<std::pair<std::string, std::string>>& merges);
  void MergeSymbols(std::string_view piece, std::vector<int32_t>* out) const;
  // The initial symbols of a char-level piece (HF's merge_word before merge_all).
  void CharSymbols(std::string_view piece, std::vector<int32_t>* ids) const;
  void MergeIds(const std::vector<int32_t>& ids, std::vector<int32_t>* out) const;
  const Merge* FindMerge(int32_t left, int32_t right) const;

  // Byte-level: each byte's symbol id (-1: dropped). Char-level: each byte's <0xNN> id (-1: none).
  std::array<int32_t, 256> byte_ids_{};
  bool char_level_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  std::optional<int32_t> unk_id_;                   // Char-level only.
  std::unordered_map<char32_t, int32_t> char_ids_;  // Char-level: single-character tokens.
  std::unordered_map<uint64_t, Merge> merges_;
  std::shared_ptr<Cache> cache_;
};

}  // namespace dq::tok_internal
