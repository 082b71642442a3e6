// Backoff: delays between reconnection attempts, exponential with jitter and bounded.
//
// Attempt n (0-based) waits a random time in [(1 - jitter) * d, d] with
// d = min(max_ms, initial_ms * multiplier^n): exponential so a long outage costs few
// attempts, capped so a caller notices the service's return within max_ms, and jittered
// so a fleet of workers or clients cut off together does not reconnect in lock-step.
//
// Thread-safety: not thread-safe (one per retry loop).
#ifndef FUSETUNE_BASE_BACKOFF_H_
#define FUSETUNE_BASE_BACKOFF_H_

#include <cstdint>
#include <random>

namespace fusetune {

struct BackoffOptions {
  int64_t initial_ms = 100;
  int64_t max_ms = 5000;
  double multiplier = 2.0;
  double jitter = 0.5;  // fraction of the delay drawn at random, in [0, 1]
};

class Backoff {
 public:
  explicit Backoff(BackoffOptions options = {}, uint64_t seed = std::random_device{}());

  // The delay before the next attempt, in milliseconds; advances the attempt count.
  int64_t NextDelayMs();
  // Back to the initial delay (after a success).
  void Reset() { attempt_ = 0; }
  int attempt() const { return attempt_; }

 private:
  BackoffOptions options_;
  std::mt19937_64 rng_;
  int attempt_ = 0;
};

}  // namespace fusetune

#endif  // FUSETUNE_BASE_BACKOFF_H_
