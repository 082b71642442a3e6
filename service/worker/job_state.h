// JobState: the state of the job one device is running, with every transition in one place
// (internal to the worker library).
//
// Phases and their transitions (anything else is refused with FailedPrecondition and
// changes nothing):
//
//   from                  transition        to
//   kIdle                 BeginLeasing      kLeasing
//   kLeasing              EndLeasing        kIdle         nothing leased
//   kLeasing              Hold              kHolding
//   kHolding              StartMeasuring    kMeasuring
//   kMeasuring            FinishMeasuring   kHolding
//   kMeasuring            WaitForTick       kAbandoned    the watchdog's deadline passed
//   kAbandoned            FinishMeasuring   kHolding      (cause kHung: the job is over)
//   kHolding              BeginCompleting   kCompleting
//   kHolding, kCompleting EndJob            kIdle
//   kIdle                 Exit              kExited
//
//   kIdle        no job: registering, resting after a failure, or between jobs.
//   kLeasing     long-polling LeaseJob, with a max_jobs reservation when one was taken.
//   kHolding     the job is leased to this device and not being measured: reading its
//                options, the resume lookup, waiting for uploads, reporting, releasing.
//   kMeasuring   the sweep (or one problem's audit) runs on the device. The watchdog gives
//                up on the job when no progress came within the limit StartMeasuring set.
//   kAbandoned   the watchdog gave the job up (the heartbeat thread released it and returned
//                its reservation); the device is still inside the measurement.
//   kCompleting  CompleteJob in flight: the lease lapsing now is no news.
//   kExited      the device's main loop returned.
//
// Why a held job stops early (cause(), strongest last; a weaker cause never replaces a
// stronger one): kStop (the worker stops), kDeviceError (a streak of launch failures),
// kLeaseLost (the heartbeat learnt that the server took the job back), kHung (the watchdog
// gave up). Any cause sets the cancel token the tuner polls between trials.
//
// Waiters wait on the condition variable, never poll: the heartbeat thread for its next beat
// or the watchdog's deadline (WaitForTick), the main thread for uploads (WaitUploaded), the
// Worker for the main loop's exit (WaitExited). Uploads are not state of this class: the
// uploader calls NotifyWaiters when it made progress.
//
// Thread-safety: thread-safe. Predicates passed in run under this object's lock and may take
// the uploader's or the spool's lock (never the reverse).
#ifndef FUSETUNE_WORKER_JOB_STATE_H_
#define FUSETUNE_WORKER_JOB_STATE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fusetune::worker_internal {

enum class JobPhase { kIdle, kLeasing, kHolding, kMeasuring, kAbandoned, kCompleting, kExited };
enum class StopCause { kNone, kStop, kDeviceError, kLeaseLost, kHung };

std::string_view JobPhaseName(JobPhase phase);

class JobState {
 public:
  // What the heartbeat thread is to do next (WaitForTick).
  struct Tick {
    enum class Kind { kShutdown, kBeat, kHung };
    Kind kind = Kind::kShutdown;
    // kBeat: the job to renew (0: none). kHung: the job the watchdog gave up.
    int64_t job_id = 0;
    // kBeat: the registered heartbeat interval.
    absl::Duration heartbeat;
    // kHung: the job held a max_jobs reservation, which the caller is to return.
    bool return_reservation = false;
    // kHung: the limit that passed and what was measured ("trial" or "audit"), for the log.
    absl::Duration watchdog_limit;
    std::string_view measuring;
  };

  JobState() = default;
  JobState(const JobState&) = delete;
  JobState& operator=(const JobState&) = delete;

  // ---- transitions (FailedPrecondition, naming both phases, when not allowed from here)
  // kIdle -> kLeasing; `reserved`: a max_jobs reservation was taken for this lease.
  absl::Status BeginLeasing(bool reserved);
  // kLeasing -> kIdle (nothing leased). True when the reservation is to be returned.
  absl::StatusOr<bool> EndLeasing();
  // kLeasing -> kHolding: `job_id` is now this device's. The cause is reset (to kStop when
  // the worker is already stopping).
  absl::Status Hold(int64_t job_id);
  // kHolding -> kMeasuring: the watchdog gives up after `limit` without progress;
  // `measuring` ("trial", "audit") names the unit of progress in its log line.
  absl::Status StartMeasuring(absl::Duration limit, std::string_view measuring);
  // kMeasuring or kAbandoned -> kHolding (after kAbandoned the cause is kHung).
  absl::Status FinishMeasuring();
  // kHolding -> kCompleting.
  absl::Status BeginCompleting();
  // kHolding or kCompleting -> kIdle. `completed` (only from kCompleting): the server has
  // the job's outcome, so its reservation stays counted. True when the reservation is to be
  // returned (held, not completed, and not returned by the watchdog already).
  absl::StatusOr<bool> EndJob(bool completed);
  // kIdle -> kExited.
  absl::Status Exit();

  // ---- causes (no phase change)
  // A measured trial or audit: the watchdog's clock starts again.
  void NoteProgress();
  // A streak of launch failures: the job is to be released. Ignored unless measuring.
  void DeviceFailed();
  // The server says `job_id`'s lease is no longer valid. True when that is the held job and
  // it was not completing or given up (it then stops with kLeaseLost).
  bool LeaseLost(int64_t job_id);
  // The worker stops: a held job stops between trials; waits that give up on a stop end.
  void Stop();
  // The device's registration: the heartbeat starts (every `heartbeat`).
  void SetRegistered(absl::Duration heartbeat);
  // Ends WaitForTick (the heartbeat thread exits).
  void StopThreads();
  // Wakes the waiters to re-check their predicates (the uploader made progress).
  void NotifyWaiters();

  // ---- waits
  // For the heartbeat thread: blocks until registered and either `next_beat` or the
  // watchdog's deadline comes, or StopThreads. When the watchdog's deadline passed while
  // measuring, moves to kAbandoned (cause kHung) and says so.
  Tick WaitForTick(absl::Time next_beat);
  // Blocks until `uploaded()` is true (true), or `deadline` passes, the lease is lost, or,
  // with `give_up_on_stop`, the worker stops (false).
  bool WaitUploaded(const std::function<bool()>& uploaded, absl::Time deadline, bool give_up_on_stop);
  // Blocks until kExited (true) or `deadline` (false).
  bool WaitExited(absl::Time deadline);

  // ---- queries
  JobPhase phase() const;
  StopCause cause() const;
  // A cause is set: the held job is to stop.
  bool cancelled() const;
  bool registered() const;
  // Inside a measurement the watchdog gave up on (the device is stuck in a kernel).
  bool hung() const;
  // The job was given up by the watchdog (trials it still returns are dropped).
  bool abandoned() const;
  // What the tuner polls between trials: set with any cause, reset by Hold.
  const std::atomic<bool>* cancel_token() const { return &cancel_; }

 private:
  absl::Status Refuse(std::string_view what) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RaiseLocked(StopCause cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetPhaseLocked(JobPhase phase) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  JobPhase phase_ ABSL_GUARDED_BY(mu_) = JobPhase::kIdle;
  StopCause cause_ ABSL_GUARDED_BY(mu_) = StopCause::kNone;
  int64_t job_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool holds_reservation_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  bool threads_stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration heartbeat_ ABSL_GUARDED_BY(mu_) = absl::Seconds(10);
  absl::Time last_progress_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration watchdog_limit_ ABSL_GUARDED_BY(mu_) = absl::InfiniteDuration();
  std::string_view measuring_ ABSL_GUARDED_BY(mu_) = "trial";
  // Written under mu_ only; an atomic because the tuner reads it without the lock.
  std::atomic<bool> cancel_{false};
};

}  // namespace fusetune::worker_internal

#endif  // FUSETUNE_WORKER_JOB_STATE_H_
