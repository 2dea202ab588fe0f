#include "common/tokenizer/bpe.h"

#include <algorithm>
#include <mutex>
#include <queue>

#include "common/tokenizer/utf8.h"

namespace dq::tok_internal {
namespace {

constexpr size_t kMaxCachedPieceBytes = 64;
constexpr size_t kMaxCacheEntries = 1 << 16;
constexpr int kCacheShards = 16;

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  bool alive;
};

struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

struct BpeModel::Cache {
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  std::array<Shard, kCacheShards> shards;
  Shard& For(std::string_view piece) { return shards[StringHash{}(piece) % kCacheShards]; }
};

absl::Status BpeModel::AddMerges(const TokenIdMap& vocab,
                                 const std::vector<std::pair<std::string, std::string>>& merges) {
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto l = vocab.find(left), r = vocab.find(right), m = vocab.find(left + right);
    if (l == vocab.end() || r == vocab.end() || m == vocab.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "BPE merge #%d (\"%s\" + \"%s\") uses a token that is not in the vocabulary (missing: "
          "\"%s\"); the vocabulary and merges do not belong together",
          rank, left, right,
          l == vocab.end()   ? left
          : r == vocab.end() ? right
                             : left + right));
    }
    merges_[PairKey(l->second, r->second)] = {static_cast<int32_t>(rank), m->second};
  }
  return absl::OkStatus();
}

absl::StatusOr<BpeModel> BpeModel::Build(
    const TokenIdMap& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
    std::optional<int32_t> unk_id) {
  BpeModel model;
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    AppendUtf8(ByteToUnicode(static_cast<uint8_t>(b)), &symbol);
    auto it = vocab.find(symbol);
    model.byte_ids_[b] = it != vocab.end() ? it->second : unk_id.value_or(-1);
  }
  DQ_RETURN_IF_ERROR(model.AddMerges(vocab, merges));
  model.cache_ = std::make_shared<Cache>();
  return model;
}

absl::StatusOr<BpeModel> BpeModel::BuildCharLevel(
    const TokenIdMap& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
    std::optional<int32_t> unk_id, bool byte_fallback, bool fuse_unk) {
  BpeModel model;
  model.char_level_ = true;
  model.byte_fallback_ = byte_fallback;
  model.fuse_unk_ = fuse_unk;
  model.unk_id_ = unk_id;
  for (int b = 0; b < 256; ++b) {
    auto it = vocab.find(absl::StrFormat("<0x%02X>", b));
    model.byte_ids_[b] = it != vocab.end() ? it->second : -1;
  }
  for (const auto& [token, id] : vocab) {
    char32_t cp;
    if (!token.empty() && DecodeUtf8(token, 0, &cp) == static_cast<int>(token.size())) {
      model.char_ids_.emplace(cp, id);
    }
  }
  DQ_RETURN_IF_ERROR(model.AddMerges(vocab, merges));
  model.cache_ = std::make_shared<Cache>();
  return model;
}

const BpeModel::Merge* BpeModel::FindMerge(int32_t left, int32_t right) const {
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::CharSymbols(std::string_view piece, std::vector<int32_t>* ids) const {
  // As HF's merge_word: a pending <unk> is added before the next known character only, so byte
  // fallback tokens that come first land before it.
  std::optional<int32_t> pending_unk;
  for (size_t i = 0; i < piece.size();) {
    char32_t cp;
    const int len = std::max(DecodeUtf8(piece, i, &cp), 1);
    const std::string_view ch = piece.substr(i, len);
    i += len;
    if (auto it = char_ids_.find(cp); it != char_ids_.end()) {
      if (pending_unk) ids->push_back(*pending_unk);
      pending_unk.reset();
      ids->push_back(it->second);
      continue;
    }
    if (byte_fallback_ && std::all_of(ch.begin(), ch.end(), [&](char c) {
          return byte_ids_[static_cast<uint8_t>(c)] >= 0;
        })) {
      for (char c : ch) ids->push_back(byte_ids_[static_cast<uint8_t>(c)]);
      continue;
    }
    if (!unk_id_) continue;
    if (pending_unk && !fuse_unk_) ids->push_back(*pending_unk);
    pending_unk = unk_id_;
  }
  if (pending_unk) ids->push_back(*pending_unk);
}

void BpeModel::MergeSymbols(std::string_view piece, std::vector<int32_t>* out) const {
  std::vector<int32_t> ids;
  ids.reserve(piece.size());
  if (char_level_) {
    CharSymbols(piece, &ids);
  } else {
    for (char c : piece) {
      const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
      if (id >= 0) ids.push_back(id);
    }
  }
  MergeIds(ids, out);
}

void BpeModel::MergeIds(const std::vector<int32_t>& ids, std::vector<int32_t>* out) const {
  std::vector<Symbol> syms;
  syms.reserve(ids.size());
  for (int32_t id : ids) {
    const auto n = static_cast<int32_t>(syms.size());
    syms.push_back({id, n - 1, n + 1, true});
  }
  if (syms.empty()) return;
  syms.back().next = -1;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || syms[pos].next < 0) return;
    if (const Merge* m = FindMerge(syms[pos].id, syms[syms[pos].next].id)) {
      heap.push({m->rank, pos, m->new_id});
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) push(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& s = syms[top.pos];
    if (!s.alive || s.next < 0) continue;
    const Merge* m = FindMerge(s.id, syms[s.next].id);
    if (m == nullptr || m->new_id != top.new_id) continue;
    Symbol& right = syms[s.next];
    right.alive = false;
    s.id = top.new_id;
    s.next = right.next;
    if (s.next >= 0) syms[s.next].prev = top.pos;
    push(s.prev);
    push(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out->push_back(syms[i].id);
}

void BpeModel::Encode(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  if (piece.size() == 1 && !char_level_) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(piece[0])];
    if (id >= 0) out->push_back(id);
    return;
  }
  if (piece.size() > kMaxCachedPieceBytes) {
    MergeSymbols(piece, out);
    return;
  }
  Cache::Shard& shard = cache_->For(piece);
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.map.find(piece);
    if (it != shard.map.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out->size();
  MergeSymbols(piece, out);
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kMaxCacheEntries / kCacheShards) shard.map.clear();
  shard.map.emplace(std::string(piece), std::vector<int32_t>(out->begin() + start, out->end()));
}

}  // namespace dq::tok_internal
