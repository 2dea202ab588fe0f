#include "engine/generate/generator.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <span>
#include <vector>

#include "common/tokenizer/incremental_detokenizer.h"
#include "engine/sampler/sampler.h"
#include "engine/sampler/stop_checker.h"
#include "engine/spec/hidden_capture.h"
#include "engine/spec/verify.h"

namespace dq {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

struct Generator::Sequence {
  size_t index = 0;
  const GenerationRequest* request = nullptr;
  KvSequence kv;
  Sampler sampler;
  IncrementalDetokenizer detok;
  StopChecker stop;
  GenerationResult result;
  int32_t next_token = -1;  // sampled, not yet fed to the model
  // Speculation only: prompt + emitted tokens (the drafter's view), this step's fed tokens
  // (next_token, then the draft), and the draft length.
  std::vector<int32_t> history;
  std::vector<int32_t> input;
  AdaptiveK k{1, false};
  bool done = false;
  double decode_start = 0;

  Sequence(size_t i, const GenerationRequest& r, const Tokenizer& tok)
      : index(i),
        request(&r),
        sampler(r.params),
        detok(tok),
        stop(r.params.stop, r.params.min_tokens) {}
};

absl::Status Generator::CheckRequests(std::span<const GenerationRequest> requests) const {
  const ModelConfig& c = runner_.config();
  int blocks = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& r = requests[i];
    auto fail = [&](absl::Status s) {
      return absl::Status(s.code(), absl::StrCat("request ", i, ": ", s.message()));
    };
    if (r.prompt.empty()) return fail(absl::InvalidArgumentError("the prompt is empty"));
    if (static_cast<int64_t>(r.prompt.size()) >= c.max_context) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("the prompt has ", r.prompt.size(), " tokens; the model's context is ",
                       c.max_context, " tokens; shorten the prompt")));
    }
    for (int32_t t : r.prompt) {
      if (t < 0 || t >= c.vocab_size) {
        return fail(absl::InvalidArgumentError(
            absl::StrCat("token id ", t, " is not in [0, ", c.vocab_size, ")")));
      }
    }
    absl::Status v = Validate(r.params, c.vocab_size);
    if (!v.ok()) return fail(v);
    const int64_t total = std::min<int64_t>(r.prompt.size() + r.params.max_tokens, c.max_context);
    blocks += runner_.kv_pool().BlocksFor(static_cast<int>(total));
  }
  const int sequences = runner_.kv_pool().num_free_sequences();
  if (static_cast<int>(requests.size()) > sequences) {
    return absl::ResourceExhaustedError(absl::StrCat(
        requests.size(), " requests, but this model keeps recurrent state per sequence and has ",
        sequences, " free state slots; send fewer requests at once or raise the slot count"));
  }
  if (!runner_.kv_pool().can_allocate(blocks)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the requests need ", blocks, " KV blocks but ", runner_.kv_pool().num_free_blocks(),
        " are free; send fewer or shorter requests, or raise the KV capacity"));
  }
  return absl::OkStatus();
}

void Generator::Emit(Sequence& s, int32_t token, const TextCallback& on_text) {
  const SamplingParams& p = s.request->params;
  const bool is_eos = std::find(eos_.begin(), eos_.end(), token) != eos_.end();
  const bool is_stop_id =
      std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end();
  std::string piece;
  if ((is_eos && !p.ignore_eos) || is_stop_id) {
    s.done = true;
    s.result.finish_reason = FinishReason::kStop;
    piece = s.stop.Feed(s.detok.Flush()).text + s.stop.Flush();
  } else {
    s.sampler.Accept(token);
    s.result.tokens.push_back(token);
    if (options_.drafter != nullptr) s.history.push_back(token);
    StopChecker::Result r = s.stop.Feed(s.detok.Next(token));
    piece = std::move(r.text);
    if (r.stopped) {
      s.done = true;
      s.result.finish_reason = FinishReason::kStop;
    } else if (static_cast<int>(s.result.tokens.size()) >= p.max_tokens ||
               s.kv.num_tokens + 1 >= runner_.config().max_context) {
      s.done = true;
      s.result.finish_reason = FinishReason::kLength;
      r = s.stop.Feed(s.detok.Flush());
      piece += r.text + (r.stopped ? "" : s.stop.Flush());
      if (r.stopped) s.result.finish_reason = FinishReason::kStop;
    }
  }
  s.result.text += piece;
  if (on_text && !piece.empty()) on_text(s.index, piece);
  s.next_token = token;
}

absl::Status Generator::Prefill(Sequence& s) {
  const double t0 = Now();
  const std::span<const int32_t> prompt(s.request->prompt);
  const int n = static_cast<int>(prompt.size());
  KvBlockPool& pool = runner_.kv_pool();
  pool.extend(s.kv, n);
  // Prompts longer than one pass may hold (the CUDA backend's max_batch_tokens) prefill in
  // chunks, each attending to the KV the earlier ones cached; only the last one samples.
  const int chunk = options_.prefill_chunk_tokens > 0 ? options_.prefill_chunk_tokens : n;
  for (int start = 0; start < n; start += chunk) {
    const int count = std::min(chunk, n - start);
    Batch batch{Phase::kPrefill, {{&s.kv, prompt.subspan(start, count), false}}};
    const ForwardHooks hooks = capture_ ? capture_->Hooks() : ForwardHooks{};
    if (start + count < n) {
      BatchLogits unused;
      DQ_RETURN_IF_ERROR(runner_.Forward(batch, &unused, hooks));
    } else {
      Sampler* sampler = &s.sampler;
      DQ_RETURN_IF_ERROR(runner_.ForwardAndSample(batch, std::span<Sampler* const>(&sampler, 1),
                                                  std::span<int32_t>(&s.next_token, 1), nullptr,
                                                  hooks));
    }
    if (capture_) options_.drafter->ObserveTarget(s.index, start, count, capture_->Rows(0, count));
  }
  s.result.prompt_tokens = n;
  s.result.prefill_seconds = Now() - t0;
  return absl::OkStatus();
}

absl::Status Generator::DecodeStep(std::vector<Sequence*>& active, const TextCallback& on_text) {
  Batch batch{Phase::kDecode, {}};
  std::vector<Sampler*> samplers;
  for (Sequence* s : active) {
    runner_.kv_pool().extend(s->kv, s->kv.num_tokens + 1);
    batch.items.push_back({&s->kv, std::span<const int32_t>(&s->next_token, 1), false});
    samplers.push_back(&s->sampler);
  }
  // Not into next_token directly: the batch reads its inputs from there.
  std::vector<int32_t> next(active.size());
  DQ_RETURN_IF_ERROR(runner_.ForwardAndSample(batch, samplers, next));
  for (size_t i = 0; i < active.size(); ++i) Emit(*active[i], next[i], on_text);
  return absl::OkStatus();
}

absl::Status Generator::CheckSpeculation() const {
  if (options_.drafter == nullptr) return absl::OkStatus();
  if (runner_.kv_pool().has_state_slots()) {
    return absl::UnimplementedError(
        "speculative decoding on a model with recurrent state (Gated DeltaNet layers) needs "
        "state snapshots to roll a rejected draft back, which are not built yet; run without a "
        "drafter");
  }
  DQ_RETURN_IF_ERROR(Validate(options_.spec));
  DQ_RETURN_IF_ERROR(options_.drafter->CheckTarget(runner_.config()));
  const std::string name(options_.drafter->name());
  if (options_.spec.k > options_.drafter->max_draft_tokens()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--spec-k ", options_.spec.k, " is more than the ", name,
                     " drafter drafts in one step (", options_.drafter->max_draft_tokens(),
                     "); use --spec-k ", options_.drafter->max_draft_tokens(), " or less"));
  }
  if (!options_.drafter->deterministic()) {
    return absl::UnimplementedError(absl::StrCat(
        "the ", std::string(options_.drafter->name()),
        " drafter proposes a distribution; the generator verifies point-mass drafts only so far"));
  }
  return absl::OkStatus();
}

absl::Status Generator::Propose(std::vector<Sequence*>& active) {
  const int max_context = runner_.config().max_context;
  std::vector<DraftRequest> requests;
  for (Sequence* s : active) {
    // KV stays within what CheckRequests reserved (prompt + max_tokens) and the context.
    const int m =
        DraftBudget(s->k.k(), s->request->params.max_tokens,
                    static_cast<int>(s->result.tokens.size()), s->kv.num_tokens, max_context);
    requests.push_back({static_cast<uint64_t>(s->index), s->history, m});
  }
  std::vector<dq::Draft> drafts(active.size());
  DQ_RETURN_IF_ERROR(options_.drafter->Propose(requests, drafts));
  for (size_t i = 0; i < active.size(); ++i) {
    Sequence& s = *active[i];
    const size_t m = std::min<size_t>(drafts[i].tokens.size(), requests[i].max_tokens);
    s.input.assign(1, s.next_token);
    s.input.insert(s.input.end(), drafts[i].tokens.begin(), drafts[i].tokens.begin() + m);
  }
  return absl::OkStatus();
}

absl::Status Generator::SpecDecodeStep(std::vector<Sequence*>& active,
                                       const TextCallback& on_text) {
  DQ_RETURN_IF_ERROR(Propose(active));
  Batch batch{Phase::kDecode, {}};
  for (Sequence* s : active) {
    runner_.kv_pool().extend(s->kv, s->kv.num_tokens + static_cast<int>(s->input.size()));
    batch.items.push_back({&s->kv, s->input, /*all_logits=*/true});
  }
  BatchLogits logits;
  DQ_RETURN_IF_ERROR(
      runner_.Forward(batch, &logits, capture_ ? capture_->Hooks() : ForwardHooks{}));
  int64_t first_token = 0;
  for (size_t i = 0; i < active.size(); ++i) {
    VerifyAndEmit(*active[i], logits.row(logits.item_first_row[i]), logits.vocab, first_token,
                  on_text);
    first_token += static_cast<int64_t>(batch.items[i].tokens.size());
  }
  return absl::OkStatus();
}

void Generator::VerifyAndEmit(Sequence& s, const float* rows, int vocab, int64_t first_token,
                              const TextCallback& on_text) {
  const int fed = static_cast<int>(s.input.size());
  const int base = s.kv.num_tokens - fed;
  const int accepted = VerifyDraft(s.input, rows, vocab, s.sampler, [&](int j, int32_t token) {
    s.kv.num_tokens = base + 1 + j;  // what plain decoding has cached here (Emit's check)
    Emit(s, token, on_text);
    ++s.result.spec.emitted;
    return !s.done;
  });
  // Keep input[0 .. accepted]; the last emitted token is the next step's input.
  runner_.kv_pool().truncate(s.kv, base + 1 + accepted);
  ++s.result.spec.steps;
  s.result.spec.drafted += fed - 1;
  s.result.spec.accepted += accepted;
  if (fed > 1) s.k.Update(fed - 1, accepted);
  options_.drafter->Accept(static_cast<uint64_t>(s.index), accepted);
  if (capture_) {
    options_.drafter->ObserveTarget(s.index, base, accepted + 1,
                                    capture_->Rows(first_token, accepted + 1));
  }
}

absl::StatusOr<std::vector<GenerationResult>> Generator::Generate(
    std::span<const GenerationRequest> requests, const TextCallback& on_text) {
  DQ_RETURN_IF_ERROR(CheckRequests(requests));
  DQ_RETURN_IF_ERROR(CheckSpeculation());
  Drafter* drafter = options_.drafter;
  capture_.reset();
  if (drafter != nullptr && !drafter->target_layers().empty()) {
    const ModelConfig& c = runner_.config();
    capture_ =
        std::make_shared<HiddenCapture>(drafter->target_layers(), c.num_layers, c.hidden_size);
  }
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (size_t i = 0; i < requests.size(); ++i) {
    seqs.push_back(std::make_unique<Sequence>(i, requests[i], tokenizer_));
    if (drafter != nullptr) {
      seqs.back()->history = requests[i].prompt;
      seqs.back()->k = AdaptiveK(options_.spec.k, options_.spec.adaptive);
    }
  }
  absl::Status status = absl::OkStatus();
  for (auto& s : seqs) {
    // Begin first: Prefill hands a drafter that reads hidden states the prompt's.
    if (status.ok() && drafter != nullptr) status = drafter->Begin(s->index, s->request->prompt);
    if (status.ok()) status = Prefill(*s);
    if (status.ok()) Emit(*s, s->next_token, on_text);
  }
  std::vector<Sequence*> active;
  const double decode_start = Now();  // after every prefill (and drafter prefill)
  for (auto& s : seqs) {
    s->decode_start = decode_start;
    if (!s->done) active.push_back(s.get());
  }
  while (status.ok() && !active.empty()) {
    status = drafter != nullptr ? SpecDecodeStep(active, on_text) : DecodeStep(active, on_text);
    if (!status.ok()) break;
    for (Sequence* s : active) {
      if (s->done) s->result.decode_seconds = Now() - s->decode_start;
    }
    std::erase_if(active, [](Sequence* s) { return s->done; });
  }
  std::vector<GenerationResult> results;
  for (auto& s : seqs) {
    if (drafter != nullptr) drafter->End(s->index);
    runner_.kv_pool().release(s->kv);
    results.push_back(std::move(s->result));
  }
  if (!status.ok()) return status;
  return results;
}

}  // namespace dq
