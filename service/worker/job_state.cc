#include "job_state.h"

#include <algorithm>

#include "absl/time/clock.h"
#include "fusetune/base/strings.h"

namespace fusetune::worker_internal {

std::string_view JobPhaseName(JobPhase phase) {
  switch (phase) {
    case JobPhase::kIdle: return "idle";
    case JobPhase::kLeasing: return "leasing";
    case JobPhase::kHolding: return "holding";
    case JobPhase::kMeasuring: return "measuring";
    case JobPhase::kAbandoned: return "abandoned";
    case JobPhase::kCompleting: return "completing";
    case JobPhase::kExited: return "exited";
  }
  return "unknown";
}

absl::Status JobState::Refuse(std::string_view what) const {
  return absl::FailedPreconditionError(Cat("job state: cannot ", what, " while ", JobPhaseName(phase_)));
}

void JobState::RaiseLocked(StopCause cause) {
  cause_ = std::max(cause_, cause);
  cancel_.store(true);
  cv_.SignalAll();
}

void JobState::SetPhaseLocked(JobPhase phase) {
  phase_ = phase;
  cv_.SignalAll();
}

absl::Status JobState::BeginLeasing(bool reserved) {
  absl::MutexLock lock(&mu_);
  if (phase_ != JobPhase::kIdle) return Refuse("begin leasing");
  holds_reservation_ = reserved;
  SetPhaseLocked(JobPhase::kLeasing);
  return absl::OkStatus();
}

absl::StatusOr<bool> JobState::EndLeasing() {
  absl::MutexLock lock(&mu_);
  if (phase_ != JobPhase::kLeasing) return Refuse("end leasing");
  const bool reserved = std::exchange(holds_reservation_, false);
  SetPhaseLocked(JobPhase::kIdle);
  return reserved;
}

absl::Status JobState::Hold(int64_t job_id) {
  absl::MutexLock lock(&mu_);
  if (phase_ != JobPhase::kLeasing) return Refuse("hold a job");
  job_id_ = job_id;
  cause_ = stopping_ ? StopCause::kStop : StopCause::kNone;
  cancel_.store(stopping_);
  SetPhaseLocked(JobPhase::kHolding);
  return absl::OkStatus();
}

absl::Status JobState::StartMeasuring(absl::Duration limit, std::string_view measuring) {
  absl::MutexLock lock(&mu_);
  if (phase_ != JobPhase::kHolding || cause_ == StopCause::kHung) return Refuse("start measuring");
  watchdog_limit_ = limit;
  measuring_ = measuring;
  last_progress_ = absl::Now();
  SetPhaseLocked(JobPhase::kMeasuring);
  return absl::OkStatus();
}

absl::Status JobState::FinishMeasuring() {
  absl::MutexLock lock(&mu_);
  if (phase_ != JobPhase::kMeasuring && phase_ != JobPhase::kAbandoned) return Refuse("finish measuring");
  SetPhaseLocked(JobPhase::kHolding);
  return absl::OkStatus();
}

absl::Status JobState::BeginCompleting() {
  absl::MutexLock lock(&mu_);
  if (phase_ != JobPhase::kHolding || cause_ == StopCause::kHung) return Refuse("complete");
  SetPhaseLocked(JobPhase::kCompleting);
  return absl::OkStatus();
}

absl::StatusOr<bool> JobState::EndJob(bool completed) {
  absl::MutexLock lock(&mu_);
  if (completed ? phase_ != JobPhase::kCompleting
                : phase_ != JobPhase::kHolding && phase_ != JobPhase::kCompleting) {
    return Refuse(completed ? "end a completed job" : "end a job");
  }
  const bool reserved = std::exchange(holds_reservation_, false);
  job_id_ = 0;
  cause_ = StopCause::kNone;
  cancel_.store(false);
  SetPhaseLocked(JobPhase::kIdle);
  return reserved && !completed;
}

absl::Status JobState::Exit() {
  absl::MutexLock lock(&mu_);
  if (phase_ != JobPhase::kIdle) return Refuse("exit");
  SetPhaseLocked(JobPhase::kExited);
  return absl::OkStatus();
}

void JobState::NoteProgress() {
  absl::MutexLock lock(&mu_);
  last_progress_ = absl::Now();
}

void JobState::DeviceFailed() {
  absl::MutexLock lock(&mu_);
  if (phase_ == JobPhase::kMeasuring) RaiseLocked(StopCause::kDeviceError);
}

bool JobState::LeaseLost(int64_t job_id) {
  absl::MutexLock lock(&mu_);
  const bool held = phase_ == JobPhase::kHolding || phase_ == JobPhase::kMeasuring;
  if (job_id == 0 || job_id != job_id_ || !held || cause_ == StopCause::kHung) return false;
  RaiseLocked(StopCause::kLeaseLost);
  return true;
}

void JobState::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  const bool held = phase_ == JobPhase::kHolding || phase_ == JobPhase::kMeasuring;
  if (held) {
    RaiseLocked(StopCause::kStop);
  } else {
    cv_.SignalAll();
  }
}

void JobState::SetRegistered(absl::Duration heartbeat) {
  absl::MutexLock lock(&mu_);
  registered_ = true;
  heartbeat_ = heartbeat;
  cv_.SignalAll();
}

void JobState::StopThreads() {
  absl::MutexLock lock(&mu_);
  threads_stopped_ = true;
  cv_.SignalAll();
}

void JobState::NotifyWaiters() {
  absl::MutexLock lock(&mu_);
  cv_.SignalAll();
}

JobState::Tick JobState::WaitForTick(absl::Time next_beat) {
  absl::MutexLock lock(&mu_);
  while (!threads_stopped_) {
    const absl::Time now = absl::Now();
    absl::Time wake = absl::InfiniteFuture();
    if (registered_) {
      if (phase_ == JobPhase::kMeasuring && now - last_progress_ >= watchdog_limit_) {
        Tick tick;
        tick.kind = Tick::Kind::kHung;
        tick.job_id = job_id_;
        tick.return_reservation = std::exchange(holds_reservation_, false);
        tick.watchdog_limit = watchdog_limit_;
        tick.measuring = measuring_;
        RaiseLocked(StopCause::kHung);
        SetPhaseLocked(JobPhase::kAbandoned);
        return tick;
      }
      if (now >= next_beat) {
        const bool held = phase_ == JobPhase::kHolding || phase_ == JobPhase::kMeasuring ||
                          phase_ == JobPhase::kCompleting;
        Tick tick;
        tick.kind = Tick::Kind::kBeat;
        tick.job_id = held && cause_ != StopCause::kHung ? job_id_ : 0;
        tick.heartbeat = heartbeat_;
        return tick;
      }
      wake = next_beat;
      if (phase_ == JobPhase::kMeasuring) wake = std::min(wake, last_progress_ + watchdog_limit_);
    }
    cv_.WaitWithDeadline(&mu_, wake);
  }
  return Tick{};
}

bool JobState::WaitUploaded(const std::function<bool()>& uploaded, absl::Time deadline, bool give_up_on_stop) {
  absl::MutexLock lock(&mu_);
  while (!uploaded()) {
    if (absl::Now() >= deadline || cause_ == StopCause::kLeaseLost) return false;
    if (give_up_on_stop && stopping_) return false;
    cv_.WaitWithDeadline(&mu_, deadline);
  }
  return true;
}

bool JobState::WaitExited(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (phase_ != JobPhase::kExited) {
    if (absl::Now() >= deadline) return false;
    cv_.WaitWithDeadline(&mu_, deadline);
  }
  return true;
}

JobPhase JobState::phase() const {
  absl::MutexLock lock(&mu_);
  return phase_;
}

StopCause JobState::cause() const {
  absl::MutexLock lock(&mu_);
  return cause_;
}

bool JobState::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cause_ != StopCause::kNone;
}

bool JobState::registered() const {
  absl::MutexLock lock(&mu_);
  return registered_;
}

bool JobState::hung() const {
  absl::MutexLock lock(&mu_);
  return phase_ == JobPhase::kAbandoned;
}

bool JobState::abandoned() const {
  absl::MutexLock lock(&mu_);
  return cause_ == StopCause::kHung;
}

}  // namespace fusetune::worker_internal
