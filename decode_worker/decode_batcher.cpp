#include "decode_worker/decode_batcher.h"

#include <algorithm>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "decode_worker/lease_part_regions.h"
#include "engine/sampler/sampler.h"
#include "engine/spec/verify.h"
#include "worker_common/proto_convert.h"

namespace dq::decode {
namespace v1 = dqserve::v1;

struct DecodeBatcher::Sequence {
  DecodeJob job;
  KvSequence kv;  // the lease's blocks; the lease table owns them
  Sampler sampler;
  std::shared_ptr<DecodeStream> stream;
  int generated = 0;
  int32_t next_token = 0;  // sampled, not yet fed to the model
  bool done = false;       // the stream has ended (engine thread, or under mu_)
  bool abort = false;      // guarded by mu_
  std::string abort_reason;
  // Speculation (engine thread only): the drafter's view (prompt + emitted tokens), this step's
  // fed tokens (next_token, then the draft), the adaptive draft length and the counters.
  bool speculate = false;
  bool draft_begun = false;  // the drafter knows the sequence (End it at retirement)
  uint64_t id = 0;
  std::vector<int32_t> history;
  std::vector<int32_t> input;
  // The tokens whose KV the blocks hold, in order (prompt, then fed tokens), kept for the prefix
  // cache (DecodeBatcherOptions::keep_kv); empty: nothing is kept.
  std::vector<int32_t> kv_tokens;
  AdaptiveK k{1, false};
  SpecStats spec;

  Sequence(DecodeJob j, KvSequence k)
      : job(std::move(j)),
        kv(std::move(k)),
        sampler(job.params),
        stream(std::make_shared<DecodeStream>(job.request_id)) {}
};

DecodeBatcher::DecodeBatcher(ModelRunner& runner, KvLeaseTable& leases,
                             DecodeBatcherOptions options)
    : runner_(runner),
      leases_(leases),
      options_(std::move(options)),
      max_context_(runner.config().max_context) {
  if (options_.drafter != nullptr && !options_.drafter->target_layers().empty()) {
    const ModelConfig& c = runner_.config();
    capture_ = std::make_unique<HiddenCapture>(options_.drafter->target_layers(), c.num_layers,
                                               c.hidden_size);
  }
  engine_ = std::thread([this] { Loop(); });
}

DecodeBatcher::~DecodeBatcher() { Shutdown(); }

absl::StatusOr<std::shared_ptr<DecodeStream>> DecodeBatcher::Submit(DecodeJob job) {
  std::unique_lock lock(mu_);
  if (stop_) return absl::UnavailableError("the decode worker is shutting down; retry elsewhere");
  if (live_.contains(job.request_id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("request ", job.request_id, " is already decoding on this worker"));
  }
  // Committing under mu_ closes the window in which Abort could find the request neither
  // decoding nor holding an uncommitted lease.
  auto kv = leases_.Commit(job.lease_id, job.num_tokens);
  if (!kv.ok()) return kv.status();
  auto seq = std::make_unique<Sequence>(std::move(job), std::move(*kv));
  Sequence& s = *seq;
  // The prefill worker drew these random numbers for the first token; continue its stream.
  s.sampler.ResumeAfter(s.job.sampler_draws);
  s.id = next_sequence_id_++;
  if (options_.keep_kv != KeepKv::kNone &&
      static_cast<int>(s.job.prompt.size()) == s.job.num_tokens) {
    s.kv_tokens = s.job.prompt;
  }
  if (options_.drafter != nullptr && s.job.speculate) {
    s.speculate = true;
    s.history = std::move(s.job.prompt);
    s.k = AdaptiveK(options_.spec.k, options_.spec.adaptive);
  }
  v1::PositionLogprobs first;
  if (s.job.logprobs) {
    if (s.job.first_logprobs) {
      first = *s.job.first_logprobs;
    } else {
      // Keep one entry per token even when the prefill worker sent none.
      first.mutable_chosen()->set_token_id(s.job.first_token);
    }
  }
  Emit(s, s.job.first_token, s.job.logprobs ? &first : nullptr);
  std::shared_ptr<DecodeStream> stream = s.stream;
  live_.emplace(s.job.request_id, &s);
  if (s.done) {
    RetireLocked(s);
    return stream;
  }
  if (!options_.land_kv) {
    waiting_.push_back(std::move(seq));
    cv_.notify_all();
    return stream;
  }
  lock.unlock();
  // The sequence is live (Abort flags it) but not queued, so no step touches its blocks while
  // they fill; the lease is committed, so they stay its own.
  const absl::Status landed = options_.land_kv(s.job.lease_id);
  lock.lock();
  if (!landed.ok()) {
    Finish(s, v1::FINISH_REASON_ERROR, landed.ToString());
    RetireLocked(s);
    return absl::Status(landed.code(), absl::StrCat("request ", s.job.request_id,
                                                    ": the prompt's KV did not reach the "
                                                    "cache: ",
                                                    landed.message()));
  }
  if (stop_) {
    Finish(s, v1::FINISH_REASON_ABORT, "the decode worker is shutting down");
    RetireLocked(s);
    return stream;
  }
  // An Abort meanwhile set s.abort: the next sweep ends it.
  waiting_.push_back(std::move(seq));
  cv_.notify_all();
  return stream;
}

bool DecodeBatcher::Abort(const std::string& request_id, const std::string& why) {
  std::lock_guard lock(mu_);
  auto it = live_.find(request_id);
  if (it == live_.end()) return leases_.ReleaseUncommittedRequest(request_id).ok();
  Sequence* s = it->second;
  s->abort = true;
  s->abort_reason = why;
  auto waiting =
      std::find_if(waiting_.begin(), waiting_.end(), [&](const auto& w) { return w.get() == s; });
  if (waiting != waiting_.end()) {
    std::unique_ptr<Sequence> owned = std::move(*waiting);
    waiting_.erase(waiting);
    Finish(*owned, v1::FINISH_REASON_ABORT, why);
    RetireLocked(*owned);
  }
  // A running sequence is retired by the engine thread at the end of the current step: its
  // blocks are in use by that step's forward pass.
  cv_.notify_all();
  return true;
}

void DecodeBatcher::Shutdown() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (engine_.joinable()) engine_.join();
}

int DecodeBatcher::running() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(running_.size());
}

int DecodeBatcher::queued() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(waiting_.size());
}

void DecodeBatcher::Loop() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !waiting_.empty() || !running_.empty(); });
      if (stop_) break;
      AdmitAndSweepLocked();
      if (running_.empty()) continue;
    }
    Step();
    std::lock_guard lock(mu_);
    std::erase_if(running_, [&](const std::unique_ptr<Sequence>& s) {
      if (s->done) RetireLocked(*s);
      return s->done;
    });
  }
  std::lock_guard lock(mu_);
  auto end_all = [&](auto& seqs) {
    for (auto& s : seqs) {
      Finish(*s, v1::FINISH_REASON_ABORT, "the decode worker is shutting down");
      RetireLocked(*s);
    }
    seqs.clear();
  };
  end_all(running_);
  end_all(waiting_);
}

void DecodeBatcher::AdmitAndSweepLocked() {
  while (static_cast<int>(running_.size()) < std::max(1, options_.max_batch) && !waiting_.empty()) {
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(running_, [&](const std::unique_ptr<Sequence>& s) {
    if (s->abort) {
      Finish(*s, v1::FINISH_REASON_ABORT, s->abort_reason);
    } else if (now >= s->job.deadline) {
      Finish(*s, v1::FINISH_REASON_ABORT,
             "the request's deadline passed while decoding; raise the deadline or shorten "
             "max_tokens");
    }
    if (s->done) RetireLocked(*s);
    return s->done;
  });
}

Batch DecodeBatcher::BuildBatch(std::vector<Sequence*>* in_batch) {
  Batch batch{Phase::kDecode, {}};
  const int block_size = runner_.kv_pool().block_size();
  for (auto& s : running_) {
    const int64_t capacity = static_cast<int64_t>(s->kv.blocks.size()) * block_size;
    if (s->kv.num_tokens + 1 > capacity) {
      Finish(*s, v1::FINISH_REASON_ERROR,
             absl::StrCat("the KV lease holds ", capacity, " tokens and the sequence reached ",
                          s->kv.num_tokens,
                          "; reserve with max_new_tokens >= the request's "
                          "max_tokens"));
      continue;
    }
    batch.items.push_back({&s->kv, std::span<const int32_t>(&s->next_token, 1), false});
    in_batch->push_back(s.get());
  }
  return batch;
}

void DecodeBatcher::Step() {
  std::vector<Sequence*> in;
  Batch batch = BuildBatch(&in);
  if (in.empty()) return;
  peak_batch_.store(std::max(peak_batch_.load(), static_cast<int>(in.size())));
  if (options_.drafter != nullptr) BeginDrafts(in);
  const bool speculative = options_.drafter != nullptr && Propose(in);
  const absl::Status st = speculative ? SpecStep(batch, in) : PlainStep(batch, in);
  steps_.fetch_add(1);
  if (!st.ok()) {
    spdlog::error("dq-decode: decode step over {} sequences failed: {}", in.size(), st.ToString());
    for (Sequence* s : in) {
      Finish(*s, v1::FINISH_REASON_ERROR, absl::StrCat("decode step failed: ", st.ToString()));
    }
  }
}

absl::Status DecodeBatcher::PlainStep(const Batch& batch, const std::vector<Sequence*>& in) {
  std::vector<Sampler*> samplers;
  for (Sequence* s : in) samplers.push_back(&s->sampler);
  // Logits come back to the host only when some sequence reports logprobs; otherwise a device
  // backend samples where the logits are and returns token ids alone.
  const bool want_logits =
      std::any_of(in.begin(), in.end(), [](const Sequence* s) { return s->job.logprobs; });
  BatchLogits logits;
  std::vector<int32_t> tokens(in.size());
  DQ_RETURN_IF_ERROR(runner_.ForwardAndSample(batch, samplers, tokens,
                                              want_logits ? &logits : nullptr, CaptureHooks()));
  for (size_t i = 0; i < in.size(); ++i) {
    Sequence& s = *in[i];
    const int32_t token = tokens[i];
    if (s.speculate) {
      ++s.spec.steps;  // a step with an empty draft: one verified position
      CountEmitted(s, false);
      ObserveKept(s, s.kv.num_tokens - 1, 1, static_cast<int64_t>(i));
    }
    if (s.job.logprobs) {
      // The raw row: ForwardAndSample sampled from a copy.
      const v1::PositionLogprobs lp = worker::PositionLogprobsOf(
          std::span<const float>(logits.last(i, batch), logits.vocab), token, s.job.top_logprobs);
      Emit(s, token, &lp);
    } else {
      Emit(s, token, nullptr);
    }
  }
  return absl::OkStatus();
}

void DecodeBatcher::BeginDrafts(const std::vector<Sequence*>& in) {
  for (Sequence* s : in) {
    if (!s->speculate || s->draft_begun) continue;
    s->draft_begun = true;
    // The history starts with the prompt (the router sends its ids), then the first token.
    const size_t n = std::min<size_t>(s->job.num_tokens, s->history.size());
    const std::span<const int32_t> prompt(s->history.data(), n);
    absl::StatusOr<v1::DrafterPrompt> source = v1::DRAFTER_PROMPT_UNSPECIFIED;
    if (options_.begin_draft) {
      source = options_.begin_draft(s->id, prompt, s->job.drafter_kv.get());
    } else {
      absl::Status st = options_.drafter->Begin(s->id, prompt);
      if (!st.ok()) source = st;
    }
    s->job.drafter_kv.reset();  // landed or not needed: the staging buffer goes
    if (!source.ok()) {
      spdlog::warn(
          "dq-decode: request {}: the {} drafter could not take the prompt, decoding "
          "without drafts: {}",
          s->job.request_id, std::string(options_.drafter->name()), source.status().ToString());
      s->speculate = false;
      continue;
    }
    s->stream->SetDrafterPrompt(*source);
  }
}

bool DecodeBatcher::Propose(const std::vector<Sequence*>& in) {
  const int block_size = runner_.kv_pool().block_size();
  std::vector<DraftRequest> requests;
  std::vector<Sequence*> drafting;
  for (Sequence* s : in) {
    s->input.assign(1, s->next_token);
    if (!s->speculate) continue;
    // The lease holds prompt + max_tokens; DraftBudget keeps every fed position inside it.
    const int capacity = static_cast<int>(s->kv.blocks.size()) * block_size;
    const int m = DraftBudget(s->k.k(), s->job.params.max_tokens, s->generated, s->kv.num_tokens,
                              std::min(capacity, max_context_));
    requests.push_back({s->id, s->history, m});
    drafting.push_back(s);
  }
  if (requests.empty()) return false;
  std::vector<Draft> drafts(requests.size());
  const absl::Status st = options_.drafter->Propose(requests, drafts);
  if (!st.ok()) {
    // Drafting is an optimisation: decode plainly rather than fail the requests.
    spdlog::warn("dq-decode: the {} drafter failed, decoding this step without drafts: {}",
                 std::string(options_.drafter->name()), st.ToString());
    return false;
  }
  bool any = false;
  for (size_t i = 0; i < drafting.size(); ++i) {
    const auto& t = drafts[i].tokens;
    const size_t m = std::min<size_t>(t.size(), requests[i].max_tokens);
    drafting[i]->input.insert(drafting[i]->input.end(), t.begin(), t.begin() + m);
    any = any || m > 0;
    // Each draft at --log-level debug: which tokens a drafter proposed, e.g. to see that its
    // prompt context (shipped or recomputed) is the same (tests/e2e/serve/spec_dflash.py).
    if (m > 0 && spdlog::should_log(spdlog::level::debug)) {
      spdlog::debug("dq-decode: {}: at {} drafted [{}]", drafting[i]->job.request_id,
                    drafting[i]->kv.num_tokens,
                    absl::StrJoin(std::span<const int32_t>(t.data(), m), ","));
    }
  }
  return any;
}

absl::Status DecodeBatcher::SpecStep(Batch& batch, const std::vector<Sequence*>& in) {
  for (size_t i = 0; i < in.size(); ++i) {
    batch.items[i].tokens = in[i]->input;
    batch.items[i].all_logits = true;
  }
  BatchLogits logits;
  DQ_RETURN_IF_ERROR(runner_.Forward(batch, &logits, CaptureHooks()));
  int64_t first_row = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    Verify(*in[i], logits.row(logits.item_first_row[i]), logits.vocab, first_row);
    first_row += static_cast<int64_t>(batch.items[i].tokens.size());
  }
  return absl::OkStatus();
}

void DecodeBatcher::ObserveKept(Sequence& s, int base, int kept, int64_t first_row) {
  if (!capture_ || !s.draft_begun) return;
  options_.drafter->ObserveTarget(s.id, base, kept, capture_->Rows(first_row, kept));
}

void DecodeBatcher::Verify(Sequence& s, const float* rows, int vocab, int64_t first_row) {
  const int fed = static_cast<int>(s.input.size());
  const int base = s.kv.num_tokens - fed;
  if (s.speculate) {
    ++s.spec.steps;
    s.spec.drafted += fed - 1;
  }
  const int accepted = VerifyDraft(s.input, rows, vocab, s.sampler, [&](int j, int32_t token) {
    s.kv.num_tokens = base + 1 + j;  // what plain decoding has cached here (Emit's check)
    if (s.speculate) CountEmitted(s, j > 0);
    if (s.job.logprobs) {
      const v1::PositionLogprobs lp = worker::PositionLogprobsOf(
          std::span<const float>(rows + int64_t{j} * vocab, vocab), token, s.job.top_logprobs);
      Emit(s, token, &lp);
    } else {
      Emit(s, token, nullptr);
    }
    return !s.done;
  });
  // Keep input[0 .. accepted]. Rolling back inside a lease moves the count only: the blocks
  // belong to the lease (it reserved prompt + max_tokens), and stale K/V past the count is
  // overwritten as the sequence regrows.
  s.kv.num_tokens = base + 1 + accepted;
  if (!s.speculate) return;
  if (fed > 1) s.k.Update(fed - 1, accepted);
  options_.drafter->Accept(s.id, accepted);
  ObserveKept(s, base, accepted + 1, first_row);
}

void DecodeBatcher::CountEmitted(Sequence& s, bool accepted_draft) {
  ++s.spec.emitted;
  if (accepted_draft) ++s.spec.accepted;
  s.stream->SetSpecCounts(static_cast<uint32_t>(s.spec.steps),
                          static_cast<uint32_t>(s.spec.drafted),
                          static_cast<uint32_t>(s.spec.accepted));
}

void DecodeBatcher::Emit(Sequence& s, int32_t token, const v1::PositionLogprobs* logprobs) {
  const SamplingParams& p = s.job.params;
  const auto& eos = options_.eos_token_ids;
  const bool is_eos = std::find(eos.begin(), eos.end(), token) != eos.end();
  const bool is_stop_id =
      std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end();
  if ((is_eos && !p.ignore_eos) || is_stop_id) {
    Finish(s, v1::FINISH_REASON_STOP);
    return;
  }
  s.sampler.Accept(token);
  ++s.generated;
  if (s.speculate) s.history.push_back(token);
  if (options_.keep_kv == KeepKv::kPromptAndAnswer && !s.kv_tokens.empty()) {
    s.kv_tokens.push_back(token);
  }
  s.stream->Push(token, logprobs);
  s.next_token = token;
  if (s.generated >= p.max_tokens || s.kv.num_tokens + 1 >= max_context_) {
    Finish(s, v1::FINISH_REASON_LENGTH);
  }
}

void DecodeBatcher::Finish(Sequence& s, v1::FinishReason reason, std::string error) {
  if (s.done) return;
  s.done = true;
  // Blocks go back before the stream ends, so a client that sees the end (and the router's
  // admission control after it) never finds them still taken. Only a normal ending keeps KV
  // for the prefix cache (an error may have left the landed prompt KV incomplete).
  const bool keep = !s.kv_tokens.empty() &&
                    (reason == v1::FINISH_REASON_STOP || reason == v1::FINISH_REASON_LENGTH);
  const size_t written = std::min<size_t>(s.kv_tokens.size(), std::max(s.kv.num_tokens, 0));
  absl::Status st =
      keep ? leases_.ReleaseAndPublish(s.job.lease_id, std::span(s.kv_tokens).first(written))
           : leases_.Release(s.job.lease_id);
  if (!st.ok()) {
    spdlog::warn("dq-decode: releasing lease {} of request {}: {}", s.job.lease_id,
                 s.job.request_id, st.ToString());
  }
  s.stream->Finish(reason, std::move(error));
}

void DecodeBatcher::RetireLocked(Sequence& s) {
  Finish(s, v1::FINISH_REASON_ABORT, "ended without a reason");  // no-op when already ended
  // Only running sequences have begun drafting, and only the engine thread retires those.
  if (s.draft_begun) {
    options_.drafter->End(s.id);
    s.draft_begun = false;
  }
  live_.erase(s.job.request_id);
}

}  // namespace dq::decode
