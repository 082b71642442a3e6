// StopToken: asks a long measurement to stop early, for a signal (a cancel flag another thread
// or a signal handler sets) or a time budget (a deadline on the steady clock).
//
// A backend reads it between launches and, where one launch can take seconds (the CPU
// backend), between tiles of a launch; the tuner reads it between trials and blocks. So
// Ctrl-C or a spent budget stops a sweep within about one tile's time, not one trial's.
//
// Thread-safety: Check() and Requested() may be called from any number of threads at once
// (the flag is read atomically; the rest is immutable after construction).
#ifndef FUSETUNE_KERNELS_STOP_TOKEN_H_
#define FUSETUNE_KERNELS_STOP_TOKEN_H_

#include <atomic>
#include <chrono>
#include <optional>
#include <utility>

#include "absl/status/status.h"

namespace fusetune {

class StopToken {
 public:
  using Clock = std::chrono::steady_clock;

  StopToken() = default;  // never asks to stop
  // `cancel` (may be null; must outlive every copy of the token) asks to stop when true;
  // `deadline`, when set, once the steady clock passes it.
  explicit StopToken(const std::atomic<bool>* cancel, std::optional<Clock::time_point> deadline = std::nullopt)
      : cancel_(cancel), deadline_(std::move(deadline)) {}

  // OK while the work may go on; Cancelled when the flag is set (checked first: a signal
  // wins over a budget); DeadlineExceeded once the deadline has passed.
  absl::Status Check() const {
    if (cancel_ != nullptr && cancel_->load(std::memory_order_relaxed)) {
      return absl::CancelledError("stopped by a signal");
    }
    if (deadline_ && Clock::now() >= *deadline_) return absl::DeadlineExceededError("the time budget ran out");
    return absl::OkStatus();
  }
  // The same question without building a status: cheap enough to ask per tile.
  bool Requested() const {
    return (cancel_ != nullptr && cancel_->load(std::memory_order_relaxed)) ||
           (deadline_ && Clock::now() >= *deadline_);
  }

  // True when the status is one Check() returns to stop (Cancelled or DeadlineExceeded).
  static bool IsStop(const absl::Status& status) {
    return absl::IsCancelled(status) || absl::IsDeadlineExceeded(status);
  }

  const std::optional<Clock::time_point>& deadline() const { return deadline_; }

 private:
  const std::atomic<bool>* cancel_ = nullptr;
  std::optional<Clock::time_point> deadline_;
};

}  // namespace fusetune

#endif  // FUSETUNE_KERNELS_STOP_TOKEN_H_
