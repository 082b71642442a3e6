// Worker: the daemon that runs tuning jobs for the service on a host's devices.
//
// One Worker drives every local device it is given, one DeviceRunner per device, each with
// its own Backend instance, worker id ("<worker_id>-d<N>"), spool file and threads:
//
//   main thread   RegisterWorker (DeviceInfo of its device) -> long-poll LeaseJob for its
//                 device class -> RunSweep over the leased problems (variants, precisions
//                 and budgets from the lease) -> wait until the job's trials are uploaded ->
//                 CompleteJob. An audit job instead runs RunAudit per problem on the
//                 recorded best config the lease carries, uploads the audit's trials, then
//                 sends its summary (ReportAudit). One job per device at a time.
//   uploader      sends spooled trials with ReportTrials (a stream per run) and marks them
//                 acknowledged in the spool once the server confirmed them.
//   heartbeat     renews the lease every heartbeat_ms; lease_valid=false cancels the sweep
//                 (the job was taken back); also the watchdog: a trial running longer than
//                 trial_timeout (an audit: longer than its whole bound of measurements
//                 times trial_timeout) marks the device failed and releases its job.
//
// Durability: the sweep's sink is the spool (fsync'ed before the trial counts as done), so
// measured trials survive a worker kill or a service outage; on restart the spool is
// uploaded before the device leases again. Trials are idempotent by id on the server, and
// sweeps are deterministic (fixed searcher seed), so a job resumed by another worker after
// a lease expiry re-measures the same configs under the same trial ids: nothing duplicates.
//
// Failures: RPC errors are retried with capped, jittered exponential backoff (and the gRPC
// channel reconnects with a bounded backoff of its own). A device whose sweep fails (a
// backend or spool error, or a hung trial caught by the watchdog) releases its job back to
// the queue and is retried after device_retry; the other devices carry on. A streak of
// launch failures (device_error_streak) counts as a device failure and is not recorded, so
// the job's next holder measures those configs on a healthy device.
//
// Shutdown: RequestStop() (async-signal-safe) lets each device finish its current trial,
// upload what it can within shutdown_upload_timeout, then complete its job if the sweep had
// finished or release it otherwise; Run() then returns OK.
//
// Thread-safety: Run() is called once, from one thread; RequestStop() and stats() from any
// thread (RequestStop also from a signal handler).
#ifndef FUSETUNE_WORKER_WORKER_H_
#define FUSETUNE_WORKER_WORKER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/base/backoff.h"

namespace fusetune {
namespace worker_internal {
class DeviceRunner;
class WorkerContext;
}  // namespace worker_internal

struct WorkerOptions {
  // "host:port" of `fusetune serve`, or several replicas' "host:port,host:port,...": calls go to
  // one, and one that ends UNAVAILABLE or DEADLINE_EXCEEDED moves the next calls to the next
  // (fusetune/wire/failover.h).
  std::string server;
  std::string token;           // worker token (sent as "authorization: Bearer <token>")
  std::string tls_root_certs;  // PEM; TLS when set
  std::string backend = "cpu";
  // Device indices to drive; empty = every device of the backend (CountDevices).
  std::vector<int> devices;
  // > 0 (backend "cpu" only): drive this many independent CPU backend instances as if they
  // were separate devices, each limited to hardware_threads / cpu_devices threads. For
  // exercising multi-device scheduling without GPUs.
  int cpu_devices = 0;
  std::string spool_dir;       // must exist or be creatable; one spool file per device
  std::string worker_id;       // base id; device N registers as "<worker_id>-d<N>"
  std::string host;            // reported host name (default: gethostname)
  int max_jobs = 0;            // exit after this many completed jobs (all devices); 0 = never
  int lease_wait_ms = 10000;   // LeaseJob long-poll wait
  BackoffOptions backoff{.initial_ms = 100, .max_ms = 5000, .multiplier = 2.0, .jitter = 0.5};
  // A single trial running longer than this is a hung device (watchdog).
  absl::Duration trial_timeout = absl::Minutes(5);
  absl::Duration device_retry = absl::Seconds(30);     // a failed device waits this long
  // This many launch failures in a row (configs the backend said it can run) mean a broken
  // device (e.g. a sticky CUDA error), not bad configs: the job is released and those
  // failures are not recorded. 0 = never.
  int device_error_streak = 3;
  absl::Duration shutdown_upload_timeout = absl::Seconds(10);
  uint64_t search_seed = 1;    // same on every worker, so a resumed job re-proposes the same
  // Testing only: sleep this long after each recorded trial, so fault tests can act
  // mid-job on a fast CPU (0 = off).
  absl::Duration testing_trial_delay = absl::ZeroDuration();
  // Creates device `index`'s backend; default CreateBackend(backend, index) (or a CPU backend
  // per cpu_devices slot). Tests inject failing or hanging backends here.
  std::function<absl::StatusOr<std::unique_ptr<Backend>>(int index)> backend_factory;
  // Progress lines go here (default: stderr). Called from several threads.
  std::function<void(const std::string& line)> log;
};

struct WorkerStats {
  int64_t jobs_completed = 0;   // CompleteJob(success) acknowledged
  int64_t jobs_failed = 0;      // CompleteJob(success=false): the job itself was unrunnable
  int64_t jobs_released = 0;    // given back (shutdown or device failure)
  int64_t jobs_lost = 0;        // the lease was taken back while running
  int64_t trials_recorded = 0;  // appended to the spools
  int64_t trials_uploaded = 0;  // acknowledged by the server
  int64_t trials_rejected = 0;  // refused as malformed by the server (dropped, logged)
  int64_t device_failures = 0;  // sweeps that failed or hung
  int devices = 0;
};

class Worker {
 public:
  // Checks the options (server, spool dir, backend, devices) and creates every device's
  // backend and spool. InvalidArgument for bad options; Unavailable when a backend or
  // device is missing; Internal for spool I/O errors. Connects lazily (no network here).
  static absl::StatusOr<std::unique_ptr<Worker>> Create(WorkerOptions options);
  ~Worker();

  // Runs until RequestStop() or max_jobs completed jobs. OK on a clean stop; an error only
  // when no device could run at all (e.g. every backend failed to start).
  absl::Status Run();

  // Asks Run() to stop as described above. Async-signal-safe (sets an atomic flag and posts
  // a semaphore that a thread of Run() waits on).
  void RequestStop();

  WorkerStats stats() const;

  // The per-device worker ids and spool paths (for logs and tests).
  std::vector<std::string> device_worker_ids() const;
  std::vector<std::string> spool_paths() const;

 private:
  explicit Worker(std::shared_ptr<worker_internal::WorkerContext> context);

  // Shared with the devices: a device abandoned in a hung kernel keeps it alive.
  std::shared_ptr<worker_internal::WorkerContext> context_;
  std::vector<std::unique_ptr<worker_internal::DeviceRunner>> devices_;
};

}  // namespace fusetune

#endif  // FUSETUNE_WORKER_WORKER_H_
