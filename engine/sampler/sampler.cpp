#include "engine/sampler/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "common/status.h"
#include "engine/grammar/compiled_grammar.h"

namespace dq {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

absl::Status OutOfRange(const char* field, const char* range, double got) {
  return absl::InvalidArgumentError(absl::StrCat(field, " must be in ", range, ", got ", got));
}

bool InClosed(float v, float lo, float hi) { return v >= lo && v <= hi; }  // false for NaN

// Index of the largest value, lowest index on ties; NaNs are skipped. 0 if all are NaN/-inf.
int32_t Argmax(std::span<const float> logits) {
  int32_t best = 0;
  float best_value = kNegInf;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > best_value) {
      best_value = logits[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

float MaxIgnoringNaN(std::span<const float> logits) {
  float m = kNegInf;
  for (float v : logits) m = v > m ? v : m;
  return m;
}

// The logit below which min-p drops a token: p/p_max >= min_p <=> logit >= max + log(min_p).
float MinPThreshold(float min_p, float max_logit) {
  return min_p > 0.0f ? max_logit + std::log(min_p) : kNegInf;
}

// Draws from unnormalised probabilities in id order: prob(i) (0: dropped) of token id(i), ids
// ascending in i; the first token whose prefix mass exceeds u * total. The one rule of every
// path (and of the device kernels), so the token for a given u depends only on the kept set and
// its probabilities, not on the order a selection left them in. `fallback` when nothing is kept.
template <typename Prob, typename Id>
int32_t DrawInIdOrder(size_t n, Prob prob, Id id, double u, int32_t fallback) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += prob(i);
  const double target = u * sum;
  double acc = 0.0;
  int32_t last = fallback;
  for (size_t i = 0; i < n; ++i) {
    const float p = prob(i);
    if (p <= 0.0f) continue;
    acc += p;
    last = id(i);
    if (acc > target) return last;
  }
  return last;  // rounding left acc a hair short of target: the last kept token
}

int32_t DrawInIdOrder(std::span<const float> probs, double u, int32_t fallback) {
  return DrawInIdOrder(
      probs.size(), [&](size_t i) { return probs[i]; },
      [](size_t i) { return static_cast<int32_t>(i); }, u, fallback);
}

// The sorted path orders a kept set of up to vocab / kSortKeptFactor tokens by id; a larger
// one is scattered into a vocab-sized row instead (O(vocab), no n log n).
constexpr size_t kSortKeptFactor = 16;

// SplitMix64's output function.
uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

absl::Status ValidateConstraints(const SamplingParams& p, int vocab_size) {
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias names token id ", id,
                                                     ", which is not a token id of this model; "
                                                     "ids must be in [0, ",
                                                     vocab_size - 1, "]"));
    }
    if (!InClosed(bias, -100.0f, 100.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias of token ", id, " must be in [-100, 100], got ", bias));
    }
  }
  if (p.min_tokens < 0 || p.min_tokens > p.max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "min_tokens must be in [0, max_tokens = ", p.max_tokens, "], got ", p.min_tokens));
  }
  if (p.grammar != nullptr) {
    if (p.grammar->vocab().vocab_size() != vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("the grammar was compiled for ",
                                                     p.grammar->vocab().vocab_size(),
                                                     " tokens but the model has ", vocab_size));
    }
    if (p.ignore_eos) {
      return absl::InvalidArgumentError(
          "ignore_eos cannot be combined with response_format: a structured output ends with "
          "EOS once its document is complete; drop ignore_eos");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Validate(const SamplingParams& p, int vocab_size) {
  if (vocab_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_size must be positive, got ", vocab_size, "; is the model loaded?"));
  }
  if (!InClosed(p.temperature, 0.0f, 2.0f))
    return OutOfRange("temperature", "[0, 2]", p.temperature);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return OutOfRange("top_p", "(0, 1]", p.top_p);
  if (p.top_k < -1 || p.top_k > vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be 0 or -1 (off) or in [1, ", vocab_size, "], got ", p.top_k));
  }
  if (!InClosed(p.min_p, 0.0f, 1.0f)) return OutOfRange("min_p", "[0, 1]", p.min_p);
  if (!InClosed(p.presence_penalty, -2.0f, 2.0f)) {
    return OutOfRange("presence_penalty", "[-2, 2]", p.presence_penalty);
  }
  if (!InClosed(p.frequency_penalty, -2.0f, 2.0f)) {
    return OutOfRange("frequency_penalty", "[-2, 2]", p.frequency_penalty);
  }
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= 2.0f)) {
    return OutOfRange("repetition_penalty", "(0, 2]", p.repetition_penalty);
  }
  if (p.max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens must be at least 1, got ", p.max_tokens));
  }
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i) {
    int32_t id = p.stop_token_ids[i];
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stop_token_ids[", i, "] = ", id, " is not a token id of this model; ids must be in [0, ",
          vocab_size - 1, "]"));
    }
  }
  for (size_t i = 0; i < p.stop.size(); ++i) {
    if (p.stop[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop[", i, "] is empty; stop strings must be non-empty"));
    }
  }
  return ValidateConstraints(p, vocab_size);
}

float LogSumExp(std::span<const float> logits) {
  float m = MaxIgnoringNaN(logits);
  if (!std::isfinite(m)) return m;
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - m);  // NaN adds NaN: garbage in
  return m + static_cast<float>(std::log(sum));
}

float LogSoftmaxAt(std::span<const float> logits, int32_t token) {
  return logits[static_cast<size_t>(token)] - LogSumExp(logits);
}

std::vector<TokenLogprob> TopLogprobs(std::span<const float> logits, int k) {
  size_t n = std::min(logits.size(), static_cast<size_t>(std::max(k, 0)));
  if (n == 0) return {};
  auto key = [&](int32_t id) {
    float v = logits[static_cast<size_t>(id)];
    return std::isnan(v) ? kNegInf : v;
  };
  auto better = [&](int32_t a, int32_t b) {
    float ka = key(a), kb = key(b);
    return ka > kb || (ka == kb && a < b);
  };
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  if (n < ids.size()) std::nth_element(ids.begin(), ids.begin() + n, ids.end(), better);
  std::sort(ids.begin(), ids.begin() + n, better);
  float lse = LogSumExp(logits);
  std::vector<TokenLogprob> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = {ids[i], logits[static_cast<size_t>(ids[i])] - lse};
  return out;
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  if (params_.seed.has_value()) {
    seed_ = *params_.seed;
  } else {
    std::random_device rd;
    seed_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  if (params_.top_k < 0) params_.top_k = 0;
  if (params_.grammar != nullptr) matcher_.emplace(params_.grammar);
}

double Sampler::NextUniform() {
  // The draws_-th output of SplitMix64 seeded with seed_: a pure function of (seed, counter).
  ++draws_;
  uint64_t z = Mix64(seed_ + draws_ * 0x9E3779B97F4A7C15ull);
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

void Sampler::Accept(int32_t token) {
  ++counts_[token];
  ++generated_;
  // A token the grammar refuses cannot come from Sample(); should one arrive anyway (a caller
  // feeding its own), the grammar keeps its position and the next mask still holds.
  if (matcher_) matcher_->AcceptToken(token);
}

bool Sampler::DeviceSamplable() const {
  // The same test as ApplyPenalties' early return: exactly when it changes nothing.
  return params_.repetition_penalty == 1.0f && params_.presence_penalty == 0.0f &&
         params_.frequency_penalty == 0.0f && params_.logit_bias.empty() &&
         params_.min_tokens == 0 && !matcher_;
}

void Sampler::ApplyConstraints(std::span<float> logits) {
  const auto in_row = [&](int32_t id) {
    return id >= 0 && static_cast<size_t>(id) < logits.size();
  };
  for (const auto& [id, bias] : params_.logit_bias) {
    if (in_row(id)) logits[static_cast<size_t>(id)] += bias;
  }
  const bool too_early = generated_ < params_.min_tokens;
  if (!matcher_) {
    if (!too_early) return;
    for (int32_t id : params_.eos_token_ids) {
      if (in_row(id)) logits[static_cast<size_t>(id)] = kNegInf;
    }
    for (int32_t id : params_.stop_token_ids) {
      if (in_row(id)) logits[static_cast<size_t>(id)] = kNegInf;
    }
    return;
  }
  mask_.resize(static_cast<size_t>(matcher_->compiled().mask_words()));
  matcher_->FillNextTokenMask(mask_);
  const auto in_mask = [&](int32_t id) {
    return id >= 0 && static_cast<size_t>(id) < mask_.size() * 32;
  };
  const auto clear = [&](int32_t id) {
    if (in_mask(id)) mask_[id / 32] &= ~(1u << (id % 32));
  };
  const auto none = [&] {
    return std::all_of(mask_.begin(), mask_.end(), [](uint32_t w) { return w == 0; });
  };
  if (none()) {
    // A dead end: no token of this vocabulary writes a byte the document needs (a tokenizer
    // without byte fallback). End the sequence rather than emit a token the grammar refuses.
    for (int32_t id : params_.eos_token_ids) {
      if (in_mask(id)) mask_[id / 32] |= 1u << (id % 32);
    }
  }
  if (too_early) {
    const std::vector<uint32_t> grammar_only = mask_;
    for (int32_t id : params_.eos_token_ids) clear(id);
    for (int32_t id : params_.stop_token_ids) clear(id);
    if (none()) mask_ = grammar_only;
  }
  for (size_t i = 0; i < logits.size(); ++i) {
    const bool allowed = i / 32 < mask_.size() && ((mask_[i / 32] >> (i % 32)) & 1u);
    if (!allowed) logits[i] = kNegInf;
  }
}

int Sampler::Count(int32_t token) const {
  auto it = counts_.find(token);
  return it == counts_.end() ? 0 : it->second;
}

void Sampler::ApplyPenalties(std::span<float> logits) const {
  const float rep = params_.repetition_penalty;
  const float presence = params_.presence_penalty;
  const float frequency = params_.frequency_penalty;
  if (rep == 1.0f && presence == 0.0f && frequency == 0.0f) return;
  for (const auto& [token, count] : counts_) {
    if (token < 0 || static_cast<size_t>(token) >= logits.size() || count <= 0) continue;
    float& l = logits[static_cast<size_t>(token)];
    if (rep != 1.0f) l = l > 0.0f ? l / rep : l * rep;
    l -= frequency * static_cast<float>(count) + presence;
  }
}

int32_t Sampler::Sample(std::span<float> logits) {
  // Always advance the counter, so the k-th call uses the k-th number whatever the path.
  const double u = NextUniform();
  if (logits.empty()) return 0;
  ApplyConstraints(logits);
  ApplyPenalties(logits);
  if (params_.temperature < kGreedyTemperature) return Argmax(logits);
  if (params_.temperature != 1.0f) {
    const float inv_t = 1.0f / params_.temperature;
    for (float& l : logits) l *= inv_t;
  }
  const bool top_k_on = params_.top_k > 0 && static_cast<size_t>(params_.top_k) < logits.size();
  if (!top_k_on && params_.top_p >= 1.0f) return SampleUnsorted(logits, u);
  return SampleSorted(logits, u);
}

int32_t Sampler::SampleUnsorted(std::span<float> logits, double u) const {
  const float m = MaxIgnoringNaN(logits);
  if (!std::isfinite(m)) return Argmax(logits);  // +inf wins outright; all -inf/NaN: token 0
  const float threshold = MinPThreshold(params_.min_p, m);
  for (float& l : logits) {
    l = l >= threshold ? std::exp(l - m) : 0.0f;  // NaN fails the comparison: dropped
  }
  return DrawInIdOrder(logits, u, 0);
}

namespace {

// Orders candidates most likely first, lower id first on ties: a strict total order, so the
// selections below are deterministic.
struct ByValueDesc {
  template <typename C>
  bool operator()(const C& a, const C& b) const {
    return a.value > b.value || (a.value == b.value && a.id < b.id);
  }
};

}  // namespace

int32_t Sampler::SampleSorted(std::span<float> logits, double u) {
  candidates_.clear();
  candidates_.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isnan(logits[i])) candidates_.push_back({logits[i], static_cast<int32_t>(i)});
  }
  if (candidates_.empty()) return 0;
  size_t k = candidates_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < k) {
    k = static_cast<size_t>(params_.top_k);
    std::nth_element(candidates_.begin(), candidates_.begin() + k, candidates_.end(),
                     ByValueDesc());
  }
  const Candidate best =
      *std::min_element(candidates_.begin(), candidates_.begin() + k, ByValueDesc());
  const float m = best.value;
  if (!std::isfinite(m)) return best.id;
  // From here on `value` is the unnormalised probability exp(logit - max), in (0, 1].
  for (size_t i = 0; i < k; ++i) candidates_[i].value = std::exp(candidates_[i].value - m);
  const size_t n = params_.top_p < 1.0f ? SelectNucleus(k) : k;
  // The draw goes over the kept set (min-p: p / p_max = value) in id order: the selection above
  // leaves candidates in an implementation-defined order, and the token must not depend on it
  // (the device kernels draw in id order too). Both ways below sum and draw the same values in
  // the same order.
  const float min_p = params_.min_p;
  const auto kept_end = std::partition(candidates_.begin(), candidates_.begin() + n,
                                       [&](const Candidate& c) { return c.value >= min_p; });
  const size_t kept = static_cast<size_t>(kept_end - candidates_.begin());
  if (kept * kSortKeptFactor > logits.size()) {
    std::fill(logits.begin(), logits.end(), 0.0f);  // `logits` is scratch from here
    for (auto c = candidates_.begin(); c != kept_end; ++c) {
      logits[static_cast<size_t>(c->id)] = c->value;
    }
    return DrawInIdOrder(logits, u, best.id);
  }
  std::sort(candidates_.begin(), kept_end,
            [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  return DrawInIdOrder(
      kept, [&](size_t i) { return candidates_[i].value; },
      [&](size_t i) { return candidates_[i].id; }, u, best.id);
}

namespace {

// Buckets of probabilities in (0, 1]: the bit pattern of a positive float grows with its value,
// so (bits(1) - bits(p)) >> 18 is a monotone bucket index, 32 buckets per power of two.
constexpr uint32_t kOneBits = 0x3F800000u;
constexpr int kBucketShift = 18;
constexpr size_t kNumBuckets = (kOneBits >> kBucketShift) + 1;

size_t BucketOf(float p) {
  uint32_t bits;
  std::memcpy(&bits, &p, sizeof(bits));
  return (kOneBits - std::min(bits, kOneBits)) >> kBucketShift;
}

}  // namespace

size_t Sampler::SelectNucleus(size_t k) {
  // The nucleus is the n most likely candidates for the least n whose mass reaches
  // top_p * total (token i stays iff the mass before it is < top_p * total). A flat
  // distribution over 150k tokens can have a nucleus of tens of thousands, so rather than
  // sorting: histogram the mass by probability bucket, find the bucket where the cut falls,
  // and order only that bucket's tokens.
  bucket_mass_.assign(kNumBuckets, 0.0);
  double total = 0.0;
  for (size_t i = 0; i < k; ++i) {
    bucket_mass_[BucketOf(candidates_[i].value)] += candidates_[i].value;
    total += candidates_[i].value;
  }
  const double target = static_cast<double>(params_.top_p) * total;
  double before = 0.0;
  size_t cut = 0;
  while (cut + 1 < kNumBuckets && before + bucket_mass_[cut] < target) {
    before += bucket_mass_[cut++];
  }
  auto begin = candidates_.begin();
  auto end = begin + k;
  auto mid =
      std::partition(begin, end, [&](const Candidate& c) { return BucketOf(c.value) < cut; });
  auto last =
      std::partition(mid, end, [&](const Candidate& c) { return BucketOf(c.value) == cut; });
  return std::max<size_t>(CutInOrder(mid - begin, last - begin, before, target), 1);
}

size_t Sampler::CutInOrder(size_t lo, size_t hi, double before, double target) {
  // Quickselect on mass: [0, lo) holds the top lo candidates with mass `before` < target, and
  // the cut is in (lo, hi]. Halving with nth_element keeps even one huge bucket (all logits
  // equal) O(n) instead of a full sort.
  auto begin = candidates_.begin();
  while (hi - lo > 64) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(begin + lo, begin + mid, begin + hi, ByValueDesc());
    double mass = 0.0;
    for (size_t i = lo; i < mid; ++i) mass += candidates_[i].value;
    if (before + mass >= target) {
      hi = mid;
    } else {
      before += mass;
      lo = mid;
    }
  }
  std::sort(begin + lo, begin + hi, ByValueDesc());
  for (size_t i = lo; i < hi; ++i) {
    if (before >= target) return i;
    before += candidates_[i].value;
  }
  return hi;
}

}  // namespace dq
