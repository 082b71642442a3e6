// JobStore: the part of a Store that keeps the server's workers and its job queue (the lease
// state machine). Backend-independent (no SQL types).
#ifndef FUSETUNE_DB_JOB_STORE_H_
#define FUSETUNE_DB_JOB_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/records/job.h"
#include "fusetune/records/worker.h"

namespace fusetune {

// The lease token of a caller that has none (a client older than lease tokens): the holder is
// then checked by worker id alone, without fencing.
inline constexpr int64_t kNoLeaseToken = 0;
// A `now_unix_ms` of the lease methods that asks for the database's clock (PostgreSQL's
// clock_timestamp(), SQLite's host clock) instead of the caller's: servers sharing a database
// then agree on expiry whatever their own clocks say.
inline constexpr int64_t kDatabaseClock = 0;

// Each state transition is atomic: two servers (or threads) sharing one store never lease
// one job twice. Times are Unix milliseconds.
//
// Thread-safety: implementations are thread-safe.
class JobStore {
 public:
  virtual ~JobStore() = default;

  // ---- workers
  // Registers a worker or replaces its record (a restarted daemon re-registers). InvalidArgument
  // for an empty worker id or device class or a negative time; registered_unix_ms 0 is stored as
  // now, last_heartbeat_unix_ms 0 as the registration time.
  virtual absl::Status UpsertWorker(const WorkerRecord& w) = 0;
  // Moves the worker's last heartbeat to `now_unix_ms` (never backwards). NotFound when the
  // worker is not registered; InvalidArgument for an empty id or a negative time.
  virtual absl::Status TouchWorker(std::string_view worker_id, int64_t now_unix_ms) = 0;
  // Every registered worker, ordered by worker id; an empty list when none.
  virtual absl::StatusOr<std::vector<WorkerRecord>> ListWorkers() = 0;

  // ---- jobs (state machine: queued -> leased -> done | failed; leased -> queued on expiry)
  // Queues a job (whatever state it carries, it starts queued and unleased); returns its id.
  // InvalidArgument for an empty device class, no problem or an empty problem key, a negative
  // max_trials, a max_seconds that is not finite and >= 0, or a negative time.
  virtual absl::StatusOr<int64_t> EnqueueJob(const Job& job) = 0;
  // NotFound when no job has that id; InvalidArgument for a non-positive id.
  virtual absl::StatusOr<Job> GetJob(int64_t job_id) = 0;
  // Newest first (highest job_id); limit in [1, 100000] else InvalidArgument.
  virtual absl::StatusOr<std::vector<Job>> ListJobs(std::optional<JobState> state = std::nullopt, int limit = 1000) = 0;
  // Atomically: returns expired leases to the queue, then leases the oldest queued job for
  // `device_class` to `worker_id` until now + lease_ms, with a new lease_token (larger than
  // every earlier one of the job). NotFound when none is queued. Two callers at once never
  // lease one job (PostgreSQL: FOR UPDATE SKIP LOCKED; SQLite: the write lock).
  //
  // For every lease method, now_unix_ms kDatabaseClock (0) is the database's clock.
  virtual absl::StatusOr<Job> LeaseJob(std::string_view worker_id, std::string_view device_class,
                                       int64_t now_unix_ms, int64_t lease_ms) = 0;
  // Extends the lease. FailedPrecondition if the job is no longer leased by this worker, or
  // when `lease_token` is not kNoLeaseToken and is not the current lease's token (a stale
  // holder: its lease expired and the job was leased again; the message says so). A lease
  // past its expiry that no LeaseJob/ExpireLeases has reclaimed yet is still held.
  // (Same for CompleteJob and ReleaseJob.)
  virtual absl::Status RenewLease(int64_t job_id, std::string_view worker_id, int64_t lease_token,
                                  int64_t now_unix_ms, int64_t lease_ms) = 0;
  // Sets the run a leased job writes to (first lease creates it).
  virtual absl::Status SetJobRun(int64_t job_id, int64_t run_id) = 0;
  // Completes a leased job exactly once: OK the first time (for the leasing worker with the
  // current token), OK and no change when already done by the same worker under the same
  // token (a retry), FailedPrecondition otherwise (a stale token included).
  virtual absl::Status CompleteJob(int64_t job_id, std::string_view worker_id, int64_t lease_token, bool success,
                                   std::string_view error, int64_t now_unix_ms) = 0;
  // Returns a leased job to the queue (worker shutting down). FailedPrecondition if not held
  // (or held under another token).
  virtual absl::Status ReleaseJob(int64_t job_id, std::string_view worker_id, int64_t lease_token) = 0;
  // Returns every lease expired at now_unix_ms (kDatabaseClock: the database's clock) to the
  // queue; the number returned.
  virtual absl::StatusOr<int> ExpireLeases(int64_t now_unix_ms) = 0;
  // Count of jobs per state.
  virtual absl::StatusOr<std::vector<std::pair<JobState, int64_t>>> CountJobsByState() = 0;
};

}  // namespace fusetune

#endif  // FUSETUNE_DB_JOB_STORE_H_
