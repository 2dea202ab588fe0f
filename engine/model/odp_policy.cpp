#include "engine/model/odp_policy.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"

namespace dq {

OdpForwardModel::OdpForwardModel(std::shared_ptr<ForwardModel> resident,
                                 std::shared_ptr<ForwardModel> streamed, int64_t crossover_tokens)
    : resident_(std::move(resident)),
      streamed_(std::move(streamed)),
      crossover_(crossover_tokens) {}

const ForwardModel& OdpForwardModel::Pick(const Batch& batch) const {
  if (Streams(batch)) {
    streamed_passes_.fetch_add(1);
    return *streamed_;
  }
  resident_passes_.fetch_add(1);
  return *resident_;
}

absl::Status OdpForwardModel::Forward(const Batch& batch, KvBlockPool& pool, ThreadPool& threads,
                                      BatchLogits* logits, const ForwardHooks& hooks) const {
  return Pick(batch).Forward(batch, pool, threads, logits, hooks);
}

absl::Status OdpForwardModel::ForwardSample(const Batch& batch, KvBlockPool& pool,
                                            ThreadPool& threads,
                                            std::span<const DeviceSampling> per_item,
                                            std::span<int32_t> out_tokens,
                                            const ForwardHooks& hooks) const {
  return Pick(batch).ForwardSample(batch, pool, threads, per_item, out_tokens, hooks);
}

absl::StatusOr<int64_t> CrossoverFromTimings(std::span<const OdpTiming> t) {
  if (t.empty()) return absl::InvalidArgumentError("no ODP calibration timings");
  for (size_t i = 1; i < t.size(); ++i) {
    if (t[i].tokens <= t[i - 1].tokens) {
      return absl::InvalidArgumentError("ODP calibration lengths must increase");
    }
  }
  // The last length at which streaming is not faster; the crossover lies after it.
  int last_slower = -1;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i].streamed_seconds >= t[i].resident_seconds) last_slower = static_cast<int>(i);
  }
  if (last_slower < 0) return t.front().tokens;
  if (last_slower == static_cast<int>(t.size()) - 1) return kOdpNeverStream;
  const OdpTiming& a = t[last_slower];
  const OdpTiming& b = t[last_slower + 1];
  const double da = a.streamed_seconds - a.resident_seconds;  // >= 0
  const double db = b.streamed_seconds - b.resident_seconds;  // < 0
  const double x = a.tokens + (b.tokens - a.tokens) * da / (da - db);
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(x)), a.tokens + 1, b.tokens);
}

namespace {

absl::StatusOr<double> TimePrefill(const ForwardModel& m, KvBlockPool& pool, ThreadPool& threads,
                                   int64_t tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % m.config().vocab_size);
  KvSequence seq;
  if (!pool.can_extend(seq, static_cast<int>(tokens))) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the KV pool has no room for a ", tokens, "-token calibration pass"));
  }
  pool.extend(seq, static_cast<int>(tokens));
  BatchLogits logits;
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s =
      m.Forward(Batch{Phase::kPrefill, {{&seq, ids, false}}}, pool, threads, &logits, {});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  pool.release(seq);
  DQ_RETURN_IF_ERROR(s);
  return secs;
}

}  // namespace

absl::StatusOr<std::vector<OdpTiming>> MeasureOdpTimings(const ForwardModel& resident,
                                                         const ForwardModel& streamed,
                                                         KvBlockPool& pool, ThreadPool& threads,
                                                         int64_t max_tokens,
                                                         const OdpCalibrationOptions& o) {
  std::vector<OdpTiming> out;
  // Each side's first pass pays one-time costs (cuBLASLt heuristics, scratch growth).
  DQ_RETURN_IF_ERROR(TimePrefill(resident, pool, threads, 16, 1).status());
  DQ_RETURN_IF_ERROR(TimePrefill(streamed, pool, threads, 16, 1).status());
  for (int64_t len : o.lengths) {
    if (len > max_tokens || !pool.can_allocate(pool.BlocksFor(static_cast<int>(len)))) continue;
    OdpTiming t{len, 1e30, 1e30};
    for (int r = 0; r < std::max(1, o.repeats); ++r) {
      DQ_ASSIGN_OR_RETURN(double a, TimePrefill(resident, pool, threads, len, 2 + r));
      DQ_ASSIGN_OR_RETURN(double b, TimePrefill(streamed, pool, threads, len, 2 + r));
      t.resident_seconds = std::min(t.resident_seconds, a);
      t.streamed_seconds = std::min(t.streamed_seconds, b);
    }
    out.push_back(t);
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no ODP calibration length fits a pass of ", max_tokens,
                     " tokens; set the crossover in the config instead"));
  }
  return out;
}

absl::Status CheckOdpConfigs(const ModelConfig& p, const ModelConfig& d) {
  auto differ = [](const char* what, auto x, auto y) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ODP prefill checkpoint does not fit the decode model: ", what, " ", x,
        " (prefill) vs ", y,
        " (decode); the streamed prefill writes the KV cache decode reads, "
        "so it must be a checkpoint of the same model (another format of the same weights)"));
  };
  if (p.architecture != d.architecture)
    return differ("architecture", p.architecture, d.architecture);
  if (p.num_layers != d.num_layers) return differ("layers", p.num_layers, d.num_layers);
  if (p.num_kv_heads != d.num_kv_heads) return differ("KV heads", p.num_kv_heads, d.num_kv_heads);
  if (p.head_dim != d.head_dim) return differ("head dim", p.head_dim, d.head_dim);
  if (p.rope_theta != d.rope_theta) return differ("rope theta", p.rope_theta, d.rope_theta);
  if (p.vocab_size != d.vocab_size) return differ("vocabulary size", p.vocab_size, d.vocab_size);
  if (p.hidden_size != d.hidden_size) return differ("hidden size", p.hidden_size, d.hidden_size);
  return absl::OkStatus();
}

absl::Status CheckOdpTokenizers(const Tokenizer& p, const Tokenizer& d) {
  auto differ = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ODP prefill checkpoint's tokenizer differs from the decode model's (", what,
        "): token ids would mean different text in the two phases; use a prefill checkpoint "
        "quantized from the same model (dq-quantize writes the tokenizer with it)"));
  };
  if (p.vocab_size() != d.vocab_size()) {
    return differ(absl::StrCat(p.vocab_size(), " vs ", d.vocab_size(), " tokens"));
  }
  if (p.bos_id() != d.bos_id() || p.eos_id() != d.eos_id()) return differ("BOS/EOS ids");
  for (int32_t id = 0; id < p.vocab_size(); ++id) {
    if (p.TokenBytes(id) != d.TokenBytes(id) || p.IsSpecial(id) != d.IsSpecial(id)) {
      return differ(absl::StrCat("token ", id, ": '", std::string(p.IdToToken(id)), "' vs '",
                                 std::string(d.IdToToken(id)), "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace dq
