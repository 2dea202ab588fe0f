#include "router/worker_requests.h"

#include <random>

namespace dq::router {

dqserve::v1::SamplingParams ToWireSampling(const SamplingOptions& s, const WireSamplingOptions& o) {
  dqserve::v1::SamplingParams p;
  p.set_temperature(s.temperature);
  p.set_top_p(s.top_p);
  p.set_top_k(s.top_k);
  p.set_min_p(s.min_p);
  p.set_seed(o.seed);
  p.set_max_tokens(static_cast<uint32_t>(o.max_tokens));
  for (int32_t id : s.stop_token_ids) p.add_stop_token_ids(id);
  p.set_presence_penalty(s.presence_penalty);
  p.set_frequency_penalty(s.frequency_penalty);
  p.set_repetition_penalty(s.repetition_penalty);
  p.set_logprobs(o.logprobs);
  p.set_top_logprobs(o.logprobs ? static_cast<uint32_t>(o.top_logprobs) : 0);
  p.set_ignore_eos(s.ignore_eos);
  for (const auto& [id, bias] : s.logit_bias) (*p.mutable_logit_bias())[id] = bias;
  p.set_min_tokens(static_cast<uint32_t>(s.min_tokens));
  p.set_json_schema(s.json_schema);
  return p;
}

uint64_t SeedFor(const SamplingOptions& s) {
  if (s.seed) return *s.seed;
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

std::chrono::system_clock::time_point ToSystemDeadline(SchedulerClock::time_point deadline) {
  const auto left = deadline - SchedulerClock::now();
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(left);
}

int64_t ToUnixMs(SchedulerClock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             ToSystemDeadline(deadline).time_since_epoch())
      .count();
}

}  // namespace dq::router
