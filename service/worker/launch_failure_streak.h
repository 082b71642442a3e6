// LaunchFailureStreakSink: a TrialSink decorator that tells a broken device from bad configs
// (internal to the worker library).
//
// A launch failure (TrialOutcome::kLaunchFailed: the backend said it can run the config,
// then the launch failed) is held back while it is part of a streak. `streak` of them in a
// row mean a broken device (e.g. a sticky CUDA error), not bad configs: they are discarded,
// `on_streak` is called once (the worker releases the job and rests the device), and every
// later trial is discarded too, so the job's next holder measures those configs on a healthy
// device instead of resuming from this device's failures. Any other outcome ends the
// streak: the held failures were the configs' own and reach the inner sink first, in order.
// `streak` <= 0 passes every trial through.
//
// Thread-safety: not thread-safe (the tuner calls its sink from one thread).
#ifndef FUSETUNE_WORKER_LAUNCH_FAILURE_STREAK_H_
#define FUSETUNE_WORKER_LAUNCH_FAILURE_STREAK_H_

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "fusetune/records/sink.h"
#include "fusetune/records/trial.h"

namespace fusetune::worker_internal {

class LaunchFailureStreakSink : public TrialSink {
 public:
  // `inner` must outlive this sink; `on_streak` gets the streak's last trial.
  LaunchFailureStreakSink(TrialSink& inner, int streak, std::function<void(const Trial& last)> on_streak);

  // Holds, discards or forwards the trial as described above. OK when held or discarded;
  // otherwise the inner sink's answer (the first error when recording held failures).
  absl::Status RecordTrial(const Trial& trial) override;
  // Records the held failures (the sweep ended in the middle of a streak that had not
  // reached `streak`). OK, or the inner sink's first error.
  absl::Status Flush();
  // A streak reached `streak`: everything is discarded from now on.
  bool tripped() const { return tripped_; }

 private:
  TrialSink& inner_;
  const int streak_;
  const std::function<void(const Trial&)> on_streak_;
  std::vector<Trial> held_;
  bool tripped_ = false;
};

}  // namespace fusetune::worker_internal

#endif  // FUSETUNE_WORKER_LAUNCH_FAILURE_STREAK_H_
