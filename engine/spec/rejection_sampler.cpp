#include "engine/spec/rejection_sampler.h"

#include <algorithm>
#include <vector>

namespace dq {
namespace {

double Sum(std::span<const float> v) {
  double s = 0.0;
  for (float x : v) s += std::max(x, 0.0f);
  return s;
}

// The first id whose prefix of `weight` exceeds u * total (id order, as Sampler draws).
template <typename Weight>
int32_t DrawInIdOrder(size_t n, Weight weight, double u, int32_t fallback) {
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += weight(i);
  if (!(total > 0.0)) return fallback;
  const double target = u * total;
  double acc = 0.0;
  int32_t last = fallback;
  for (size_t i = 0; i < n; ++i) {
    const double w = weight(i);
    if (w <= 0.0) continue;
    acc += w;
    last = static_cast<int32_t>(i);
    if (acc > target) return last;
  }
  return last;
}

}  // namespace

RejectionResult RejectionSample(std::span<const float> p, std::span<const float> q, int32_t draft,
                                double u_accept, double u_resample) {
  const double ps = Sum(p), qs = Sum(q);
  const auto pn = [&](size_t i) { return ps > 0 ? std::max(p[i], 0.0f) / ps : 0.0; };
  const auto qn = [&](size_t i) { return qs > 0 ? std::max(q[i], 0.0f) / qs : 0.0; };
  const size_t x = static_cast<size_t>(draft);
  // u < p/q without dividing: q(x) = 0 (the drafter could not have drawn x) never accepts
  // unless p(x) > 0, where min(1, p/q) = 1.
  if (u_accept * qn(x) < pn(x)) return {true, draft};
  const auto residual = [&](size_t i) { return std::max(pn(i) - qn(i), 0.0); };
  // A zero residual means p == q, where every draft is accepted; fall back to p for safety.
  int32_t y = DrawInIdOrder(p.size(), residual, u_resample, -1);
  if (y < 0) y = DrawInIdOrder(p.size(), pn, u_resample, draft);
  return {false, y};
}

RejectionResult RejectionSamplePointMass(std::span<const float> p, int32_t draft, double u_accept,
                                         double u_resample) {
  const double ps = Sum(p);
  const size_t x = static_cast<size_t>(draft);
  const auto pn = [&](size_t i) { return ps > 0 ? std::max(p[i], 0.0f) / ps : 0.0; };
  if (u_accept < pn(x)) return {true, draft};
  const auto without_x = [&](size_t i) { return i == x ? 0.0 : pn(i); };
  return {false, DrawInIdOrder(p.size(), without_x, u_resample, draft)};
}

}  // namespace dq
