// Pure helpers that build the router's calls to workers: sampling parameters on the wire,
// deadlines in the workers' clock, and how a failed prefill is classified. Kept apart from the
// pipeline so they are testable without a worker.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include "dqserve/v1/generate.pb.h"
#include "router/api_types.h"
#include "router/scheduler.h"

namespace dq::router {

struct WireSamplingOptions {
  int max_tokens = 16;  // resolved against the context
  uint64_t seed = 0;    // the client's, or one the router drew
  bool logprobs = false;
  int top_logprobs = 0;
};

// The sampling parameters both workers get. Stop strings are left out on purpose: the router
// checks them on detokenized text (workers have no detokenizer in their loop) and cancels the
// decode call on a match. The seed is always set so that prefill's first draw and decode's
// continuation come from one seeded stream.
dqserve::v1::SamplingParams ToWireSampling(const SamplingOptions& s, const WireSamplingOptions& o);

// The client's seed, or a fresh random one.
uint64_t SeedFor(const SamplingOptions& s);

// A steady-clock deadline as the system-clock time point gRPC wants and as Unix epoch ms
// (the protos' deadline_unix_ms).
std::chrono::system_clock::time_point ToSystemDeadline(SchedulerClock::time_point deadline);
int64_t ToUnixMs(SchedulerClock::time_point deadline);

}  // namespace dq::router
