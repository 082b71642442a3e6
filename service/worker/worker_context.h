// WorkerContext: what every device of one Worker shares (internal to the worker library).
//
// The options, the gRPC channel and stubs, the stop request, the stats counters, the
// max_jobs reservations and the registry of calls that a stop cuts short.
//
// Stopping: RequestStop() may run in a signal handler, which can set an atomic and post a
// semaphore but cannot notify a condition variable. The stop relay thread (StartStopRelay)
// waits on that semaphore and turns the request into wakeups: it notifies this context's
// condition variable (SleepUnlessStopping, ReserveJob, WaitUntil), cancels the calls in
// flight and runs the callback the Worker gave it (the devices' job states).
//
// Thread-safety: thread-safe; RequestStop() is async-signal-safe. Lock order: a thread that
// holds mu_ (inside WaitUntil's predicate) may take a device's JobState lock, never the
// other way round.
#ifndef FUSETUNE_WORKER_WORKER_CONTEXT_H_
#define FUSETUNE_WORKER_WORKER_CONTEXT_H_

#include <semaphore.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fusetune/proto/fusetune.grpc.pb.h"
#include "fusetune/wire/failover.h"
#include "fusetune/worker/worker.h"
#include "grpcpp/grpcpp.h"

namespace fusetune::worker_internal {

class WorkerContext {
 public:
  // Creates the channel (connecting lazily) and the stubs for `options.server`.
  explicit WorkerContext(WorkerOptions options);
  ~WorkerContext();
  WorkerContext(const WorkerContext&) = delete;
  WorkerContext& operator=(const WorkerContext&) = delete;

  const WorkerOptions& options() const { return options_; }
  // The stubs of the current server address (with several, a call that finds the service away
  // moves the next calls to the next address: fusetune/wire/failover.h).
  v1::WorkerService::Stub& worker_stub() { return *worker_stubs_[channels_->current()]; }
  v1::TuningService::Stub& tuning_stub() { return *tuning_stubs_[channels_->current()]; }

  // ---- stopping
  // Async-signal-safe: sets the flag and posts the relay's semaphore.
  void RequestStop();
  bool stopping() const { return stop_.load(std::memory_order_relaxed); }
  // max_jobs jobs have been completed or failed (never with max_jobs == 0).
  bool max_jobs_done() const;
  // Stopping, or max_jobs reached: devices lease nothing more.
  bool ending() const { return stopping() || max_jobs_done(); }
  // Starts the relay thread; `on_stop` runs on it once, after a RequestStop.
  void StartStopRelay(std::function<void()> on_stop);
  // Ends and joins the relay thread (a later RequestStop only sets the flag).
  void EndStopRelay();

  // ---- waiting
  // Wakes WaitUntil and SleepUnlessStopping callers to re-check their conditions.
  void NotifyEvent();
  // Blocks until `ready()` (evaluated under this context's lock; it may take a device's
  // JobState lock) is true. Woken by NotifyEvent and by the stop relay.
  void WaitUntil(const std::function<bool()>& ready);
  // Sleeps up to `d`, returning early once stopping.
  void SleepUnlessStopping(absl::Duration d);
  // Sleeps up to `d`, returning early once ending (stopping or max_jobs reached).
  void SleepUnlessEnding(absl::Duration d);

  // ---- max_jobs reservations, so that the devices together never run more jobs than that
  // Takes a job slot, waiting while every slot is taken. True with a slot (or at once when
  // max_jobs is 0, which reserves nothing); false when the worker is ending.
  bool ReserveJob();
  // Gives back a slot taken by ReserveJob for a job that did not finish here.
  void ReturnJob();
  // Counts a job the server accepted as completed (`success`) or failed; once max_jobs are
  // done, cuts the long polls short so that every device ends.
  void CountFinishedJob(bool success);

  // ---- calls
  // Prepares a context: deadline, token. With `cancel_on_stop` (long polls and
  // registration, which a stop should cut short; uploads, releases and completions during
  // shutdown must not be) the call is registered so that a stop or max_jobs cancels it (at
  // once when the worker is already ending), and, with one server address, waits for the
  // channel to (re)connect within its deadline instead of failing at once while the service
  // is away (with several, it fails at once so that the retry goes to the next). Call Done
  // after.
  void Prepare(grpc::ClientContext& ctx, absl::Duration timeout, bool cancel_on_stop = false);
  void Done(grpc::ClientContext& ctx);
  void CancelAllCalls();

  void Log(const std::string& line) const;

  // Stats (WorkerStats); plain counters.
  std::atomic<int64_t> jobs_completed{0};
  std::atomic<int64_t> jobs_failed{0};
  std::atomic<int64_t> jobs_released{0};
  std::atomic<int64_t> jobs_lost{0};
  std::atomic<int64_t> trials_recorded{0};
  std::atomic<int64_t> trials_uploaded{0};
  std::atomic<int64_t> trials_rejected{0};
  std::atomic<int64_t> device_failures{0};

 private:
  void RelayLoop();

  const WorkerOptions options_;
  std::shared_ptr<FailoverChannels> channels_;
  std::vector<std::unique_ptr<v1::WorkerService::Stub>> worker_stubs_;  // one per address
  std::vector<std::unique_ptr<v1::TuningService::Stub>> tuning_stubs_;

  // Set by RequestStop (a signal handler may call it, hence atomic and a semaphore).
  std::atomic<bool> stop_{false};
  sem_t stop_posted_;
  std::atomic<bool> relay_end_{false};
  std::function<void()> on_stop_;  // set before the relay thread starts
  std::thread relay_;

  absl::Mutex mu_;
  absl::CondVar cv_;
  int64_t jobs_reserved_ ABSL_GUARDED_BY(mu_) = 0;  // leased or being leased, for max_jobs

  absl::Mutex calls_mu_;
  absl::flat_hash_set<grpc::ClientContext*> calls_ ABSL_GUARDED_BY(calls_mu_);
};

}  // namespace fusetune::worker_internal

#endif  // FUSETUNE_WORKER_WORKER_CONTEXT_H_
