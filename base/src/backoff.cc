#include "fusetune/base/backoff.h"

#include <algorithm>
#include <cmath>

namespace fusetune {

Backoff::Backoff(BackoffOptions options, uint64_t seed) : options_(options), rng_(seed) {
  options_.initial_ms = std::max<int64_t>(1, options_.initial_ms);
  options_.max_ms = std::max(options_.initial_ms, options_.max_ms);
  options_.multiplier = std::max(1.0, options_.multiplier);
  options_.jitter = std::clamp(options_.jitter, 0.0, 1.0);
}

int64_t Backoff::NextDelayMs() {
  // Computed in double and capped before converting, so many attempts cannot overflow.
  double d = static_cast<double>(options_.initial_ms) * std::pow(options_.multiplier, attempt_);
  d = std::min(d, static_cast<double>(options_.max_ms));
  if (attempt_ < 1000) ++attempt_;
  std::uniform_real_distribution<double> u(1.0 - options_.jitter, 1.0);
  return std::max<int64_t>(1, static_cast<int64_t>(d * u(rng_)));
}

}  // namespace fusetune
