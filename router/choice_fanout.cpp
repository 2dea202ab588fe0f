#include "router/choice_fanout.h"

#include <algorithm>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dq::router {
namespace {

struct FanoutState {
  std::mutex mu;
  size_t next = 0;       // the next choice to start
  bool stopped = false;  // a choice failed (or the client went away): start and feed no more
  int started = 0;
  std::vector<std::string> live;  // ids of choices starting or running (to abort them)
  FanoutOutcome outcome;
};

// With st.mu held: records the first failure and aborts every live sibling.
void StopLocked(FanoutState& st, RequestPipeline& pipeline, ApiError error,
                std::string retry_after) {
  if (!st.outcome.error) {
    st.outcome.error = std::move(error);
    st.outcome.retry_after = std::move(retry_after);
    st.outcome.error_before_start = st.started == 0;
  }
  st.stopped = true;
  for (const std::string& id : st.live) pipeline.Abort(id);
}

void Forget(FanoutState& st, const std::string& id) {
  st.live.erase(std::find(st.live.begin(), st.live.end(), id));
}

void RunOne(RequestPipeline& pipeline, GenerationInput input, size_t index, FanoutState& st,
            const FanoutCallbacks& cb) {
  const std::string id = input.request_id;
  StartResult start = pipeline.Start(std::move(input));
  std::unique_lock lock(st.mu);
  if (!start.ok() || st.stopped) {
    Forget(st, id);
    if (!start.ok() && !st.stopped) StopLocked(st, pipeline, start.error, start.retry_after);
    lock.unlock();  // a started request releases its lease as it goes, without the lock
    return;
  }
  ++st.started;
  if (cb.started && !cb.started(index, *start.request)) {
    Forget(st, id);
    StopLocked(st, pipeline,
               ApiError{499, "invalid_request_error", "The client closed the connection.", "", ""},
               "");
    lock.unlock();
    return;
  }
  lock.unlock();
  GenerationResult r = start.request->Run([&](const Delta& d) {
    std::lock_guard guard(st.mu);
    return !st.stopped && (!cb.delta || cb.delta(index, d));
  });
  start.request.reset();  // free the slot before the next choice or the reply
  lock.lock();
  Forget(st, id);
  if (st.stopped) return;  // aborted by a sibling's failure: its error is the outcome
  if (r.error) return StopLocked(st, pipeline, *r.error, "");
  if (cb.done) cb.done(index, r);
}

}  // namespace

std::vector<GenerationInput> FanoutInputs(std::vector<GenerationInput> prompts, int n,
                                          const std::string& request_id) {
  std::vector<GenerationInput> out;
  out.reserve(prompts.size() * n);
  const bool single = prompts.size() == 1 && n == 1;
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int j = 0; j < n; ++j) {
      GenerationInput in = prompts[i];
      in.request_id = single ? request_id : absl::StrCat(request_id, "-", i * n + j);
      if (in.sampling.seed) *in.sampling.seed += static_cast<uint64_t>(j);
      out.push_back(std::move(in));
    }
  }
  return out;
}

FanoutOutcome RunFanout(RequestPipeline& pipeline, std::vector<GenerationInput> inputs,
                        int concurrency, const FanoutCallbacks& callbacks) {
  FanoutState st;
  auto work = [&] {
    for (;;) {
      size_t i = 0;
      {
        std::lock_guard guard(st.mu);
        if (st.stopped || st.next >= inputs.size()) return;
        i = st.next++;
        st.live.push_back(inputs[i].request_id);
      }
      RunOne(pipeline, std::move(inputs[i]), i, st, callbacks);
    }
  };
  const int threads = std::clamp(concurrency, 1, static_cast<int>(inputs.size()));
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();  // the handler's own thread runs choices too (the only one for a single choice)
  for (std::thread& t : helpers) t.join();
  return std::move(st.outcome);
}

}  // namespace dq::router
