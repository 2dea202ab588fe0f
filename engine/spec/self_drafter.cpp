#include "engine/spec/self_drafter.h"

#include <algorithm>

#include "engine/sampler/sampler.h"

namespace dq {
namespace {

// Greedy: the drafter's proposal is its argmax (a point mass, see the header).
SamplingParams GreedyParams() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SelfDrafter>> SelfDrafter::Create(
    const Checkpoint& checkpoint, const ModelConfig& config, const SelfDrafterOptions& options) {
  ModelRunnerOptions ro;
  ro.threads = options.threads;
  ro.kv_capacity = options.kv_capacity;
  ro.kv_block_size = options.kv_block_size;
  ro.backend = options.backend;
  DQ_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner,
                      ModelRunner::Create(checkpoint, config, ro));
  return std::unique_ptr<SelfDrafter>(new SelfDrafter(std::move(runner)));
}

absl::Status SelfDrafter::CheckTarget(const ModelConfig& target) const {
  const ModelConfig& draft = runner_->config();
  if (draft.vocab_size != target.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the self drafter's vocabulary has ", draft.vocab_size,
                     " tokens but the target's has ", target.vocab_size,
                     "; draft with the target's own checkpoint (--draft-format) or one "
                     "that shares its tokenizer"));
  }
  return absl::OkStatus();
}

absl::Status SelfDrafter::Begin(uint64_t sequence, std::span<const int32_t> prompt) {
  State& s = states_[sequence];
  Truncate(s, 0);
  const int n = static_cast<int>(prompt.size());
  KvBlockPool& pool = runner_->kv_pool();
  // A prompt the drafter cannot hold is not an error: Propose then drafts nothing for it.
  if (n == 0 || n >= runner_->config().max_context || !pool.can_extend(s.kv, n)) {
    return absl::OkStatus();
  }
  pool.extend(s.kv, n);
  BatchLogits logits;
  DQ_RETURN_IF_ERROR(runner_->Forward(Batch{Phase::kPrefill, {{&s.kv, prompt, false}}}, &logits));
  s.tokens.assign(prompt.begin(), prompt.end());
  return absl::OkStatus();
}

absl::Status SelfDrafter::BeginWithKv(uint64_t sequence, std::span<const int32_t> prompt,
                                      const std::function<absl::Status(const KvSequence&)>& fill) {
  State& s = states_[sequence];
  Truncate(s, 0);
  const int n = static_cast<int>(prompt.size());
  KvBlockPool& pool = runner_->kv_pool();
  if (n == 0 || n >= runner_->config().max_context || !pool.can_extend(s.kv, n)) {
    return absl::OkStatus();
  }
  pool.extend(s.kv, n);
  absl::Status filled = fill(s.kv);
  if (!filled.ok()) {
    pool.truncate(s.kv, 0);
    return filled;
  }
  s.kv.num_tokens = n;  // what a prefill forward pass leaves (Begin)
  s.tokens.assign(prompt.begin(), prompt.end());
  return absl::OkStatus();
}

void SelfDrafter::End(uint64_t sequence) {
  auto it = states_.find(sequence);
  if (it == states_.end()) return;
  runner_->kv_pool().release(it->second.kv);
  states_.erase(it);
}

std::span<const int32_t> SelfDrafter::cached_tokens(uint64_t sequence) const {
  auto it = states_.find(sequence);
  if (it == states_.end()) return {};
  return it->second.tokens;
}

void SelfDrafter::Truncate(State& s, size_t tokens) {
  if (tokens >= s.tokens.size()) return;
  runner_->kv_pool().truncate(s.kv, static_cast<int>(tokens));
  s.tokens.resize(tokens);
}

int SelfDrafter::Prepare(State& s, std::span<const int32_t> history, int want) {
  // Keep what still matches the history: after a rejection the cache holds draft tokens the
  // target replaced; after a full accept it lacks the last draft token and the bonus token.
  const size_t limit = std::min(s.tokens.size(), history.size() - 1);
  const size_t keep =
      std::mismatch(s.tokens.begin(), s.tokens.begin() + limit, history.begin()).first -
      s.tokens.begin();
  Truncate(s, keep);
  // Fed positions run to history.size() + want - 2 (the last drafted token is never fed).
  const int64_t room = int64_t{runner_->config().max_context} + 1 - int64_t(history.size());
  want = static_cast<int>(std::min<int64_t>(want, room));
  if (want <= 0) return 0;
  const int total = static_cast<int>(history.size()) + want - 1;
  KvBlockPool& pool = runner_->kv_pool();
  if (!pool.can_extend(s.kv, total)) return 0;
  pool.extend(s.kv, total);
  return want;
}

absl::Status SelfDrafter::Round(std::vector<Pending>& pending, std::span<Draft> drafts) {
  Batch batch{Phase::kDecode, {}};
  std::vector<Sampler> samplers(pending.size(), Sampler(GreedyParams()));
  std::vector<Sampler*> sampler_ptrs;
  for (size_t i = 0; i < pending.size(); ++i) {
    batch.items.push_back({&pending[i].state->kv, pending[i].feed, false});
    sampler_ptrs.push_back(&samplers[i]);
  }
  std::vector<int32_t> next(pending.size());
  DQ_RETURN_IF_ERROR(runner_->ForwardAndSample(batch, sampler_ptrs, next));
  for (size_t i = 0; i < pending.size(); ++i) {
    Pending& p = pending[i];
    p.state->tokens.insert(p.state->tokens.end(), p.feed.begin(), p.feed.end());
    drafts[p.request].tokens.push_back(next[i]);
    p.feed.assign(1, next[i]);
  }
  return absl::OkStatus();
}

absl::Status SelfDrafter::Propose(std::span<const DraftRequest> requests, std::span<Draft> drafts) {
  if (drafts.size() != requests.size()) {
    return absl::InvalidArgumentError(absl::StrCat("self drafter: ", requests.size(),
                                                   " requests but ", drafts.size(), " drafts"));
  }
  std::vector<Pending> pending;
  for (size_t i = 0; i < requests.size(); ++i) {
    const DraftRequest& r = requests[i];
    drafts[i].tokens.clear();
    drafts[i].probs.clear();
    auto it = states_.find(r.sequence);
    if (it != states_.end()) it->second.proposed = false;
    if (r.max_tokens <= 0 || r.history.empty()) continue;
    State& s = states_[r.sequence];
    const int want = Prepare(s, r.history, r.max_tokens);
    if (want == 0) continue;
    s.history_size = r.history.size();
    s.proposed = true;
    const auto uncached = r.history.subspan(s.tokens.size());
    pending.push_back({&s, i, want, std::vector<int32_t>(uncached.begin(), uncached.end())});
  }
  while (!pending.empty()) {
    DQ_RETURN_IF_ERROR(Round(pending, drafts));
    std::erase_if(pending, [&](const Pending& p) {
      return static_cast<int>(drafts[p.request].tokens.size()) >= p.want;
    });
  }
  return absl::OkStatus();
}

void SelfDrafter::Accept(uint64_t sequence, int accepted) {
  auto it = states_.find(sequence);
  if (it == states_.end() || !it->second.proposed) return;
  State& s = it->second;
  s.proposed = false;
  // The cache holds history + draft[0 .. want - 2]; draft tokens past `accepted` are wrong.
  Truncate(s, s.history_size + static_cast<size_t>(std::max(accepted, 0)));
}

}  // namespace dq
