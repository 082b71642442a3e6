// SweepProgressTicker: the progress line a long sweep prints while a problem runs, so a
// problem that takes minutes does not leave the terminal silent: which problem, which step,
// how many configs of the space are screened, and the time left in the problem's budget.
//
// The sweep reports what it starts (SweepActivity, on the sweep's thread); a ticker thread
// prints the latest on stderr at once when a problem starts and then every `interval`.
//
// Thread-safety: Update may be called from one thread while the ticker thread prints; the
// destructor stops the ticker thread and must not race with Update.
#ifndef FUSETUNE_SERVICE_CLI_SWEEP_PROGRESS_H_
#define FUSETUNE_SERVICE_CLI_SWEEP_PROGRESS_H_

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "fusetune/tuner/sweep.h"

namespace fusetune::cli {

// The progress line of an activity `seconds_in_step` after it started (no newline).
std::string ProgressLine(const SweepActivity& activity, double seconds_in_step);

class SweepProgressTicker {
 public:
  SweepProgressTicker(std::FILE* out, std::chrono::duration<double> interval);
  ~SweepProgressTicker();
  SweepProgressTicker(const SweepProgressTicker&) = delete;
  SweepProgressTicker& operator=(const SweepProgressTicker&) = delete;

  // The sweep's latest activity; a new problem is printed at once.
  void Update(const SweepActivity& activity);

 private:
  void Loop();

  std::FILE* const out_;
  const std::chrono::duration<double> interval_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::optional<SweepActivity> latest_;
  std::chrono::steady_clock::time_point latest_at_;
  bool print_now_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace fusetune::cli

#endif  // FUSETUNE_SERVICE_CLI_SWEEP_PROGRESS_H_
