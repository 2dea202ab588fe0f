// The generations of one HTTP request side by side: `n` choices of each of its prompts (OpenAI's
// choice index i * n + j for prompt i, choice j), each its own pipeline request (admission,
// Reserve, Prefill, Decode), at most `concurrency` at once so that a request never waits in
// the scheduler's queue behind its own siblings. The prompt is prefilled once per choice (a
// prefix cache, when on, shares it). The first failure (a Start refused, a Run that ended in
// an error) stops the choices not yet started and aborts the running ones.
//
// The callbacks run on the choices' threads under one lock, so they may share state (an event
// stream, the choices of the body) without locking of their own.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "router/api_error.h"
#include "router/request_pipeline.h"

namespace dq::router {

struct FanoutCallbacks {
  // The choice's request is prefilled and about to decode; false stops the whole fan-out (the
  // client is gone).
  std::function<bool(size_t index, ActiveRequest& request)> started;
  // One step of the choice (ActiveRequest::Run's callback).
  std::function<bool(size_t index, const Delta& delta)> delta;
  // The choice ended without an error.
  std::function<void(size_t index, const GenerationResult& result)> done;
};

struct FanoutOutcome {
  std::optional<ApiError> error;    // the first failure: a Start's or a Run's
  std::string retry_after;          // with a Start's 429
  bool error_before_start = false;  // no choice had started when it failed (a status line fits)
  bool ok() const { return !error.has_value(); }
};

// `seed`: when set, choice j of each prompt gets seed + j, so choice 0 equals the same request
// with n = 1, and a prompt's choices do not depend on the other prompts.
std::vector<GenerationInput> FanoutInputs(std::vector<GenerationInput> prompts, int n,
                                          const std::string& request_id);

FanoutOutcome RunFanout(RequestPipeline& pipeline, std::vector<GenerationInput> inputs,
                        int concurrency, const FanoutCallbacks& callbacks);

}  // namespace dq::router
