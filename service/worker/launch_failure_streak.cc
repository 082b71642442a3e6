#include "launch_failure_streak.h"

#include <utility>

namespace fusetune::worker_internal {

LaunchFailureStreakSink::LaunchFailureStreakSink(TrialSink& inner, int streak,
                                                 std::function<void(const Trial& last)> on_streak)
    : inner_(inner), streak_(streak), on_streak_(std::move(on_streak)) {}

absl::Status LaunchFailureStreakSink::RecordTrial(const Trial& trial) {
  if (tripped_) return absl::OkStatus();
  if (trial.outcome == TrialOutcome::kLaunchFailed && streak_ > 0) {
    held_.push_back(trial);
    if (static_cast<int>(held_.size()) >= streak_) {
      held_.clear();
      tripped_ = true;
      if (on_streak_) on_streak_(trial);
    }
    return absl::OkStatus();
  }
  if (absl::Status s = Flush(); !s.ok()) return s;
  return inner_.RecordTrial(trial);
}

absl::Status LaunchFailureStreakSink::Flush() {
  if (tripped_) return absl::OkStatus();
  for (const Trial& t : held_) {
    if (absl::Status s = inner_.RecordTrial(t); !s.ok()) return s;
  }
  held_.clear();
  return absl::OkStatus();
}

}  // namespace fusetune::worker_internal
