// Pieces the tuner's sources share: clocks, the cancel flag, and how measured trials are
// ranked and cut down to contenders (the sweep's final rounds, the audit's rounds). Not part
// of the public API.
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_TUNER_SRC_INTERNAL_H_
#define FUSETUNE_TUNER_SRC_INTERNAL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "fusetune/base/time.h"
#include "fusetune/records/trial.h"

namespace fusetune::tuner_internal {

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline bool Cancelled(const std::atomic<bool>* cancel) {
  return cancel != nullptr && cancel->load(std::memory_order_relaxed);
}

// The time a trial is ranked by when choosing who goes on: a screen block's p10 (another
// process or a clock dip only ever slows a launch, so the fast end of a short block is the
// steadier estimate), the median of the per-round block medians for round trials. Screens
// are the kScreen trials and an audit's attempt-0 trials.
double RankingUs(const Trial& t);

// The kOk trials of `trials`, fastest first by RankingUs, ties in ConfigOrderLess order of
// their configs.
std::vector<Trial> RankedOk(const std::vector<Trial>& trials);

// Contenders among `ranked` (RankedOk order): those within `near_fraction` of `leader_us`
// (a RankingUs time), at least `min_count` (when there are that many), at most `max_count`.
std::vector<Trial> Contenders(const std::vector<Trial>& ranked, double leader_us, double near_fraction,
                              int min_count, int max_count);

}  // namespace fusetune::tuner_internal

#endif  // FUSETUNE_TUNER_SRC_INTERNAL_H_
