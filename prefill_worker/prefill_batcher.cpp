#include "prefill_worker/prefill_batcher.h"

#include <algorithm>
#include <chrono>

#include "common/logging.h"
#include "engine/sampler/sampler.h"
#include "prefill_worker/kv_stager.h"
#include "worker_common/proto_convert.h"
#include "worker_common/worker_status.h"

namespace dq::prefill {

PrefillBatcher::PrefillBatcher(ModelRunner& runner, KvStager& stager,
                               const PrefillBatcherOptions& options)
    : runner_(runner), stager_(stager), options_(options) {
  free_blocks_ = runner_.kv_pool().num_free_blocks();
  free_slots_ = runner_.kv_pool().state_slots().num_free();
  thread_ = std::thread([this] { Loop(); });
}

PrefillBatcher::~PrefillBatcher() { Stop(); }

void PrefillBatcher::Submit(std::shared_ptr<PrefillJob> job) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      incoming_.push_back(std::move(job));
      ++queued_;
      cv_.notify_all();
      return;
    }
  }
  std::lock_guard lock(job->mu);
  job->status = absl::UnavailableError("the prefill worker is shutting down; retry elsewhere");
  job->finished = true;
  job->cv.notify_all();
}

void PrefillBatcher::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

PrefillLoad PrefillBatcher::load() const {
  PrefillLoad l;
  l.free_kv_blocks = free_blocks_;
  l.total_kv_blocks = runner_.kv_pool().options().num_blocks;
  l.free_state_slots = free_slots_;
  l.total_state_slots = runner_.kv_pool().state_slots().num_slots();
  l.running = running_;
  l.queued = queued_;
  std::lock_guard lock(stats_mu_);
  l.prefix = prefix_stats_;
  return l;
}

void PrefillBatcher::Loop() {
  bool idle = true;  // the last iteration ran nothing: wait for news before trying again
  for (;;) {
    {
      std::unique_lock lock(mu_);
      // Jobs waiting for blocks or budget: wake now and then to notice cancels and deadlines.
      if (idle) {
        cv_.wait_for(lock, std::chrono::milliseconds(jobs_.empty() ? 1000 : 20),
                     [&] { return stopping_ || !incoming_.empty(); });
      }
      while (!incoming_.empty()) {
        jobs_.push_back(std::move(incoming_.front()));
        incoming_.pop_front();
      }
      if (stopping_) break;
    }
    DropCancelled();
    const std::vector<Step> steps = FormBatch();
    if (!steps.empty()) RunBatch(steps);
    PublishLoad();
    idle = steps.empty();
  }
  while (!jobs_.empty()) {
    Finish(jobs_.front().get(),
           absl::UnavailableError("the prefill worker is shutting down; retry elsewhere"));
  }
  PublishLoad();
}

void PrefillBatcher::DropCancelled() {
  const auto now = PrefillJob::Clock::now();
  std::vector<PrefillJob*> drop;
  for (const auto& j : jobs_) {
    if (j->cancelled) {
      drop.push_back(j.get());
    } else if (j->deadline && now >= *j->deadline) {
      drop.push_back(j.get());
    }
  }
  for (PrefillJob* j : drop) {
    Finish(j, j->cancelled ? absl::CancelledError("the caller cancelled the prefill")
                           : absl::DeadlineExceededError(absl::StrCat(
                                 "the request's deadline passed after ", j->done_tokens, " of ",
                                 j->prompt.size(), " prompt tokens were prefilled")));
  }
}

std::vector<PrefillBatcher::Step> PrefillBatcher::FormBatch() {
  KvBlockPool& pool = runner_.kv_pool();
  const int bs = pool.block_size();
  std::vector<Step> steps;
  int budget = options_.token_budget;
  int staged_blocks = 0;  // blocks this iteration writes, against the staging arena
  for (const auto& j : jobs_) {
    const int n = static_cast<int>(j->prompt.size());
    const int remaining = n - j->done_tokens;
    int chunk = 0;
    if (remaining <= budget) {
      chunk = remaining;
    } else if (remaining > options_.token_budget) {
      chunk = budget;  // too long for any one pass: chunked prefill
    }
    // FIFO: the head waits for room (budget or blocks) rather than being overtaken for good.
    if (chunk <= 0) break;
    // The arena holds a whole budget's chunk (kv_stager.h), so the head always fits.
    const int blocks = (j->done_tokens + chunk + bs - 1) / bs - j->done_tokens / bs;
    if (stager_.max_blocks() > 0 && !steps.empty() &&
        staged_blocks + blocks > stager_.max_blocks()) {
      break;
    }
    staged_blocks += blocks;
    if (!j->started) {
      if (!StartJob(*j)) break;
      chunk = std::min(chunk, n - j->done_tokens);
      if (j->drafter_writer) {
        // Sized like the target's pool, so it fits whenever the target's does.
        KvBlockPool& dpool = options_.drafter->kv_pool();
        if (dpool.can_extend(j->drafter_kv, n)) {
          dpool.extend(j->drafter_kv, n);
        } else {
          DropDrafter(*j, "the prefill worker's drafter KV pool is full");
        }
      }
      j->started = true;
      --queued_;
      ++running_;
    }
    steps.push_back(Step{j.get(), j->done_tokens, chunk});
    budget -= chunk;
    if (budget == 0) break;
  }
  return steps;
}

bool PrefillBatcher::StartJob(PrefillJob& job) {
  KvBlockPool& pool = runner_.kv_pool();
  const int n = static_cast<int>(job.prompt.size());
  std::vector<int32_t> cached;
  if (options_.prefix_cache && stager_.max_blocks() == 0 && !job.prompt_logprobs &&
      !job.drafter_writer) {
    cached = pool.AcquirePrefix(std::span<const int32_t>(job.prompt.data(), n - 1));
  }
  // A hybrid model's sequence also takes one of the pool's state slots (extend below).
  const bool slot = !pool.has_state_slots() || pool.state_slots().can_allocate();
  if (!slot || !pool.can_allocate(pool.BlocksFor(n) - static_cast<int>(cached.size()))) {
    pool.free(cached);
    return false;
  }
  job.kv.blocks = std::move(cached);
  job.kv.num_tokens = static_cast<int>(job.kv.blocks.size()) * pool.block_size();
  pool.extend(job.kv, n);
  job.done_tokens = job.cached_tokens = job.kv.num_tokens;
  return true;
}

void PrefillBatcher::RunBatch(const std::vector<Step>& steps) {
  const int bs = runner_.kv_pool().block_size();
  Batch batch{Phase::kPrefill, {}};
  for (const Step& s : steps) {
    std::span<const int32_t> tokens(s.job->prompt.data() + s.start, s.count);
    batch.items.push_back({&s.job->kv, tokens, s.job->prompt_logprobs});
  }
  std::vector<KvStager::Span> spans;
  for (const Step& s : steps) {
    // A job's first chunk after a cached prefix ships the cached blocks too: the decode lease
    // needs the whole prompt's KV.
    const int first = s.start == s.job->cached_tokens ? 0 : s.start / bs;
    spans.push_back(
        {s.job->writer.get(), first, (s.start + s.count + bs - 1) / bs, s.job->kv.blocks});
  }
  stager_.Begin(std::move(spans));
  ForwardHooks hooks;
  hooks.on_layer_kv_written = [&](int layer) { stager_.LayerWritten(layer); };
  hooks.on_layer_state_written = [&](int state_layer) {
    // A prompt's state is final once its last chunk has passed the layer.
    for (const Step& s : steps) {
      if (s.job->state_writer && IsLastChunk(s)) {
        s.job->state_writer->PostLayer(state_layer, s.job->kv.state_slot);
      }
    }
  };
  if (options_.drafter != nullptr) options_.drafter->AddTargetHooks(&hooks);
  BatchLogits logits;
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status forward = runner_.Forward(batch, &logits, hooks);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // Every layer posted (or its writer failed) before anyone waits for the transfers.
  stager_.End(forward.ok());
  // The target's transfers go on while the drafter computes.
  if (forward.ok() && options_.drafter != nullptr) RunDrafter(steps);
  for (size_t i = 0; i < steps.size(); ++i) {
    PrefillJob* job = steps[i].job;
    // The transfers read these blocks: they end before the blocks are rewritten or freed.
    const auto w0 = std::chrono::steady_clock::now();
    absl::Status sent = job->writer->Wait();
    absl::Status state = ShipState(*job, steps[i], forward.ok());
    if (job->drafter_writer) {
      const absl::Status drafted = job->drafter_writer->Wait();
      if (!drafted.ok()) DropDrafter(*job, drafted.ToString());
    }
    job->transfer_wait_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count();
    job->compute_ms += ms;
    if (!forward.ok()) {
      Finish(job,
             absl::InternalError(absl::StrCat("prefill forward pass failed: ", forward.message())));
      continue;
    }
    if (!sent.ok()) {
      Finish(job, worker::WithFailureReason(sent, dqserve::v1::FAILURE_REASON_KV_TRANSFER));
      continue;
    }
    if (!state.ok()) {
      Finish(job, worker::WithFailureReason(state, dqserve::v1::FAILURE_REASON_STATE_TRANSFER));
      continue;
    }
    job->done_tokens += steps[i].count;
    if (job->prompt_logprobs) CollectPromptLogprobs(*job, steps[i], logits, i);
    if (job->done_tokens == static_cast<int>(job->prompt.size())) {
      Complete(*job, batch, logits, i);
    }
  }
}

bool PrefillBatcher::IsLastChunk(const Step& step) {
  return step.start + step.count == static_cast<int>(step.job->prompt.size());
}

absl::Status PrefillBatcher::ShipState(PrefillJob& job, const Step& step, bool forward_ok) {
  if (!job.state_writer || !IsLastChunk(step)) return absl::OkStatus();
  // The layers whose hook did not run (a backend may skip hooks), then every transfer ends
  // before the slot is released or reused.
  if (forward_ok) job.state_writer->PostRest(job.kv.state_slot);
  return job.state_writer->Wait();
}

void PrefillBatcher::RunDrafter(const std::vector<Step>& steps) {
  const int bs = options_.drafter->kv_pool().block_size();
  std::vector<DrafterChunk> chunks;
  std::vector<KvStager::Span> spans;
  std::vector<PrefillJob*> jobs;
  int64_t target_row = 0;  // the step's first token in the target's pass
  for (const Step& s : steps) {
    PrefillJob* job = s.job;
    target_row += s.count;
    if (!job->drafter_writer) continue;
    chunks.push_back({&job->drafter_kv,
                      std::span<const int32_t>(job->prompt.data() + s.start, s.count), s.start,
                      target_row - s.count});
    spans.push_back({job->drafter_writer.get(), s.start / bs, (s.start + s.count + bs - 1) / bs,
                     job->drafter_kv.blocks});
    jobs.push_back(job);
  }
  if (jobs.empty()) return;
  KvStager& stager = options_.drafter->stager();
  stager.Begin(std::move(spans));
  const absl::Status forward = options_.drafter->Forward(chunks);
  stager.End(forward.ok());
  if (forward.ok()) return;
  for (PrefillJob* job : jobs) {
    (void)job->drafter_writer->Wait();
    DropDrafter(*job, absl::StrCat("the drafter's prefill failed: ", forward.message()));
  }
}

void PrefillBatcher::DropDrafter(PrefillJob& job, const std::string& why) {
  spdlog::warn("prefill {}: no drafter KV for this request: {}", job.request_id, why);
  if (job.drafter_skipped.empty()) job.drafter_skipped = why;
  // Precondition (every caller): no post of this writer is in flight.
  job.drafter_writer.reset();
  if (!job.drafter_kv.blocks.empty()) options_.drafter->kv_pool().release(job.drafter_kv);
}

void PrefillBatcher::CollectPromptLogprobs(PrefillJob& job, const Step& step,
                                           const BatchLogits& logits, size_t item) const {
  const int n = static_cast<int>(job.prompt.size());
  for (int p = step.start; p < step.start + step.count && p + 1 < n; ++p) {
    const float* row = logits.row(logits.item_first_row[item] + (p - step.start));
    job.result.prompt_logprobs.push_back(worker::PositionLogprobsOf(
        std::span<const float>(row, logits.vocab), job.prompt[p + 1], job.top_logprobs));
  }
}

void PrefillBatcher::Complete(PrefillJob& job, const Batch& batch, const BatchLogits& logits,
                              size_t item) {
  const float* last = logits.last(item, batch);
  std::vector<float> row(last, last + logits.vocab);
  // Exactly what Generator::Prefill does, so the first token matches the colocated path.
  Sampler sampler(job.sampling);
  job.result.first_token = sampler.Sample(row);
  job.result.sampler_draws = sampler.draws();
  job.result.drafter_kv = job.drafter_writer != nullptr;
  if (job.logprobs) {
    job.result.first_token_logprobs = worker::PositionLogprobsOf(
        std::span<const float>(last, logits.vocab), job.result.first_token, job.top_logprobs);
  }
  Finish(&job, absl::OkStatus());
}

void PrefillBatcher::Finish(PrefillJob* job, absl::Status status) {
  if (job->started) {
    // A prompt prefilled to the end leaves its full blocks for the next prompt that starts so.
    if (options_.prefix_cache && status.ok()) runner_.kv_pool().Publish(job->kv, job->prompt);
    runner_.kv_pool().release(job->kv);
    --running_;
  } else {
    --queued_;
  }
  PublishLoad();  // before the caller hears back, so its next Health sees the blocks free
  job->result.compute_ms = job->compute_ms;
  job->result.cached_tokens = job->cached_tokens;
  job->result.transfer_wait_ms = job->transfer_wait_ms;
  if (job->writer) {
    job->result.transfer_ms = job->writer->transfer_ms();
    job->result.transfer_bytes = job->writer->bytes_posted();
    job->writer.reset();  // forgets the lease's remote regions
  }
  if (job->state_writer) {
    job->result.state_transfer_bytes = job->state_writer->bytes_posted();
    job->state_writer.reset();
  }
  if (job->drafter_writer) {
    job->result.transfer_bytes += job->drafter_writer->bytes_posted();
    job->drafter_writer.reset();
  }
  if (!job->drafter_kv.blocks.empty()) options_.drafter->kv_pool().release(job->drafter_kv);
  job->result.drafter_skipped = job->drafter_skipped;
  auto it = std::find_if(jobs_.begin(), jobs_.end(), [&](const auto& j) { return j.get() == job; });
  std::shared_ptr<PrefillJob> keep = std::move(*it);  // the handler may drop its copy at once
  jobs_.erase(it);
  {
    std::lock_guard lock(job->mu);
    job->status = std::move(status);
    job->finished = true;
  }
  job->cv.notify_all();
}

void PrefillBatcher::PublishLoad() {
  free_blocks_ = runner_.kv_pool().num_free_blocks();
  free_slots_ = runner_.kv_pool().state_slots().num_free();
  std::lock_guard lock(stats_mu_);
  prefix_stats_ = runner_.kv_pool().prefix_stats();
}

}  // namespace dq::prefill
