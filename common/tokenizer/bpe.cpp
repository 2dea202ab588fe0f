#include "common/tokenizer/bpe.h"

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
  model.merges_.reserve(merges.size());
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
    model.merges_[PairKey(l->second, r->second)] = {static_cast<int32_t>(rank), m->second};
  }
  model.cache_ = std::make_shared<Cache>();
  return model;
}

const BpeModel::Merge* BpeModel::FindMerge(int32_t left, int32_t right) const {
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::MergeSymbols(std::string_view piece, std::vector<int32_t>* out) const {
  std::vector<Symbol> syms;
  syms.reserve(piece.size());
  for (char c : piece) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id < 0) continue;
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
  if (piece.size() == 1) {
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
