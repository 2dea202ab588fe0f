#include "common/tokenizer/unicode_nfc.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/tokenizer/utf8.h"

namespace dq::tok_internal {
namespace {

// Hangul syllable arithmetic (Unicode ch. 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr int kSCount = kLCount * kNCount;

struct Decomposition {
  char32_t first;
  char32_t second;  // 0 for a singleton.
};

struct NfcTables {
  std::unordered_map<char32_t, Decomposition> decompositions;
  std::unordered_map<uint64_t, char32_t> compositions;  // (first << 21 | second) -> composite.
  std::unordered_set<char32_t> composable_seconds;
  std::vector<uint32_t> ccc_firsts;  // Range starts, sorted, for binary search.

  NfcTables() {
    for (size_t i = 0; i < kNfcDecompositionsSize; ++i) {
      const uint32_t* e = &kNfcDecompositions[4 * i];
      decompositions[e[0]] = {e[1], e[2]};
      if (e[3] != 0) {
        compositions[(uint64_t{e[1]} << 21) | e[2]] = e[0];
        composable_seconds.insert(e[2]);
      }
    }
    for (size_t i = 0; i < kNfcCombiningClassesSize; ++i) {
      ccc_firsts.push_back(kNfcCombiningClasses[3 * i]);
    }
  }

  int Ccc(char32_t cp) const {
    if (cp < 0x300) return 0;
    auto it = std::upper_bound(ccc_firsts.begin(), ccc_firsts.end(), cp);
    if (it == ccc_firsts.begin()) return 0;
    size_t i = static_cast<size_t>(it - ccc_firsts.begin()) - 1;
    return cp <= kNfcCombiningClasses[3 * i + 1] ? static_cast<int>(kNfcCombiningClasses[3 * i + 2])
                                                 : 0;
  }

  void Decompose(char32_t cp, std::vector<char32_t>* out) const {
    if (cp >= kSBase && cp < kSBase + kSCount) {
      const int s = static_cast<int>(cp - kSBase);
      out->push_back(kLBase + s / kNCount);
      out->push_back(kVBase + (s % kNCount) / kTCount);
      if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
      return;
    }
    auto it = decompositions.find(cp);
    if (it == decompositions.end()) {
      out->push_back(cp);
      return;
    }
    Decompose(it->second.first, out);
    if (it->second.second != 0) Decompose(it->second.second, out);
  }

  // The primary composite of (a, b), or 0.
  char32_t Compose(char32_t a, char32_t b) const {
    if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
      return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
    }
    if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
        b < kTBase + kTCount) {
      return a + (b - kTBase);
    }
    auto it = compositions.find((uint64_t{a} << 21) | b);
    return it == compositions.end() ? 0 : it->second;
  }

  bool IsStable(char32_t cp) const {
    if (cp < 0x300) return true;
    if (cp >= kSBase && cp < kSBase + kSCount) return true;
    if ((cp >= kVBase && cp < kVBase + kVCount) || (cp > kTBase && cp < kTBase + kTCount)) {
      return false;
    }
    return Ccc(cp) == 0 && !decompositions.contains(cp) && !composable_seconds.contains(cp);
  }
};

const NfcTables& Tables() {
  static const NfcTables* tables = new NfcTables();
  return *tables;
}

// Canonical ordering: stable-sorts every run of non-starters by combining class.
void ReorderMarks(const NfcTables& t, std::vector<char32_t>* cps) {
  size_t i = 0;
  while (i < cps->size()) {
    if (t.Ccc((*cps)[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps->size() && t.Ccc((*cps)[j]) != 0) ++j;
    std::stable_sort(cps->begin() + i, cps->begin() + j,
                     [&t](char32_t a, char32_t b) { return t.Ccc(a) < t.Ccc(b); });
    i = j;
  }
}

// Canonical composition (UAX #15), in place.
void ComposeAll(const NfcTables& t, std::vector<char32_t>* cps) {
  if (cps->empty()) return;
  std::vector<char32_t>& c = *cps;
  size_t starter_pos = 0;
  char32_t starter = c[0];
  int last_class = t.Ccc(starter) == 0 ? 0 : 256;
  size_t out = 1;
  for (size_t i = 1; i < c.size(); ++i) {
    const char32_t ch = c[i];
    const int ch_class = t.Ccc(ch);
    const char32_t composite = t.Compose(starter, ch);
    if (composite != 0 && (last_class < ch_class || last_class == 0)) {
      c[starter_pos] = composite;
      starter = composite;
      continue;
    }
    if (ch_class == 0) {
      starter_pos = out;
      starter = ch;
    }
    last_class = ch_class;
    c[out++] = ch;
  }
  c.resize(out);
}

}  // namespace

bool IsNfcQuick(std::string_view text) {
  const NfcTables* tables = nullptr;
  size_t i = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    char32_t cp = 0;
    const int len = DecodeUtf8(text, i, &cp);
    if (len <= 0) return false;
    i += static_cast<size_t>(len);
    if (tables == nullptr) tables = &Tables();
    if (!tables->IsStable(cp)) return false;
  }
  return true;
}

std::string NfcNormalize(std::string_view text) {
  if (IsNfcQuick(text)) return std::string(text);
  const NfcTables& t = Tables();
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    char32_t cp = 0;
    const int len = DecodeUtf8(text, i, &cp);
    if (len <= 0) {  // Not UTF-8: callers sanitize first, but never loop forever.
      cp = 0xFFFD;
      i += 1;
    } else {
      i += static_cast<size_t>(len);
    }
    t.Decompose(cp, &cps);
  }
  ReorderMarks(t, &cps);
  ComposeAll(t, &cps);
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : cps) AppendUtf8(cp, &out);
  return out;
}

}  // namespace dq::tok_internal
