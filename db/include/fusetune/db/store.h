// Store: fusetune's SQLite database (runs, trials, best configs, regressions, audits, bench
// cells, workers, jobs).
//
// The only place in the project that speaks SQL. WAL mode, foreign keys on, busy timeout
// set, schema version in PRAGMA user_version with forward-only migrations applied by Open().
// Every write method runs in one transaction: it either fully happens or not at all, so a
// process killed at any instant leaves the last committed state.
//
// Thread-safety: a Store is thread-safe (one connection guarded by a mutex). Several
// processes may open the same file; SQLite's locking (WAL) serialises their writers.
#ifndef FUSETUNE_DB_STORE_H_
#define FUSETUNE_DB_STORE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/records/trial.h"
#include "fusetune/records/run.h"
#include "fusetune/records/sink.h"

namespace fusetune {

// The verdicts a Regression can carry: the one list of them (the store refuses others).
inline constexpr std::array<std::string_view, 4> kRegressionVerdicts = {"regressed", "improved", "same", "unknown"};

// Verdict of one regression check (see ci/).
struct Regression {
  int64_t id = 0;
  std::string commit;
  std::string baseline_commit;
  std::string device_class;
  std::string problem_key;
  std::string config_key;
  std::string metric;        // "latency" or "max_rel_error"
  double ratio = 0;          // new / baseline (dimensionless; latency: > 1 is slower); finite, >= 0
  double p_value = 1;        // after the suite's multiple-comparison correction; in [0, 1]
  std::string verdict;       // one of kRegressionVerdicts
  int64_t created_unix_ms = 0;  // Unix milliseconds; 0 on write = now
};

// The rules every stored Regression meets (RecordRegression(s) and the service check them):
// InvalidArgument naming the field for an empty commit, baseline commit, device class,
// problem key, config key or metric, a verdict outside kRegressionVerdicts, a non-finite or
// negative ratio, a p-value outside [0, 1] (or NaN) or a negative created_unix_ms.
absl::Status ValidateRegression(const Regression& r);

// One measured (problem, config) cell of a bench run: what `fusetune bench` stores and a
// regression check compares. A cell is identified by (run_id, problem_key, config_key, role).
struct BenchCell {
  int64_t run_id = 0;          // the bench run it belongs to (set by ListBenchCells)
  std::string suite;           // the suite's name, e.g. "h200-nightly"
  std::string problem_key;     // AttentionProblem::Key()
  std::string problem_json;    // the full problem incl. length lists (opaque to the store)
  std::string config_key;      // KernelConfig::Key()
  std::string role;            // why the cell is in the suite: "best", "reference", "materialized", "pick", ...
  TrialOutcome outcome = TrialOutcome::kOk;
  std::string message;         // why, for every outcome other than kOk
  double max_abs_error = 0;    // vs the fp64 reference, in output units; 0 when not verified
  double max_rel_error = 0;    // vs the fp64 reference, relative; 0 when not verified
  double tolerance = 0;        // the hard accuracy tolerance the cell was checked against (relative)
  std::vector<SampleBlock> blocks;  // timing blocks in measurement order, median_us in microseconds
  int64_t created_unix_ms = 0; // Unix milliseconds; 0 on write = now

  // The blocks' medians in order (microseconds): the samples a rank test compares.
  std::vector<double> SamplesUs() const;
};

// One change point of a cell's per-commit history (what `fusetune history --record` stores).
// A cell's history is identified by (device_class, suite, problem_key, config_key).
struct ChangePointRow {
  std::string device_class;
  std::string suite;
  std::string problem_key;
  std::string config_key;
  std::string commit;          // the first commit measured at the new level
  int64_t position = 0;        // its index in the history (0 = oldest point)
  double mean_before_us = 0;   // mean of the segment before, microseconds
  double mean_after_us = 0;    // mean of the segment after
  double ratio = 1;            // mean_after_us / mean_before_us (> 1: slower)
  double p_value = 1;          // the significance test's p-value
  std::string direction;       // "slower" or "faster"
  int64_t detected_unix_ms = 0;  // Unix milliseconds; 0 on write = now
};

// Which change points ListChangePoints returns: empty fields match all.
struct ChangePointFilter {
  std::string device_class;
  std::string suite;
  std::string problem_key;
  std::string config_key;
  std::string commit;
};

struct WorkerRecord {
  std::string worker_id;
  std::string host;
  std::string backend;
  std::string device_class;
  std::string device_json;   // DeviceInfo as JSON
  int64_t registered_unix_ms = 0;
  int64_t last_heartbeat_unix_ms = 0;
};

enum class JobState { kQueued, kLeased, kDone, kFailed };
std::string_view JobStateName(JobState s);  // "queued", "leased", "done", "failed"
// The state JobStateName names; nullopt for any other name.
std::optional<JobState> ParseJobState(std::string_view name);

// A tuning job: a list of problems to sweep on one device class at one commit.
struct Job {
  int64_t job_id = 0;
  JobState state = JobState::kQueued;
  std::string device_class;        // which workers may lease it
  std::string commit;
  std::vector<std::string> problem_keys;
  std::string spec_json;           // full request (problems incl. length lists, budget)
  int max_trials = 0;              // per problem; 0 = exhaustive
  double max_seconds = 0;          // per problem; 0 = unbounded
  std::string leased_by;           // worker_id while leased
  int64_t lease_expiry_unix_ms = 0;
  int attempts = 0;                // how many times it was leased
  int64_t run_id = 0;              // the run its trials go to (set on first lease)
  std::string error;               // when failed
  int64_t created_unix_ms = 0;
  int64_t finished_unix_ms = 0;
};

// How a committed write survives failures (see db/README.md).
enum class Durability {
  // synchronous=FULL: each commit fsyncs the WAL, so a committed write survives a process
  // kill AND a power loss / OS crash. The default: the service acknowledges uploads that
  // workers then drop from their spools.
  kPowerLoss,
  // synchronous=NORMAL: a committed write is in the WAL file (the OS page cache) before the
  // commit returns, so it survives SIGKILL of the process; a power loss may roll back the
  // last commits (never corrupts). Faster; fine for throwaway local sweeps.
  kProcessCrash,
};

// What a Store may do to its file (see db/README.md, "Reading a shared database").
enum class StoreAccess {
  // Creates the file if absent, switches it to WAL and applies missing migrations. Needs
  // write access to the file and to its directory (SQLite keeps <db>-wal and <db>-shm there).
  kReadWrite,
  // For commands that only read (report, best): never creates, migrates or changes the file,
  // and works where this process cannot write, e.g. a read-only mount or another user's
  // directory. Write methods fail with PermissionDenied.
  kReadOnly,
};

struct StoreOptions {
  StoreAccess access = StoreAccess::kReadWrite;
  Durability durability = Durability::kPowerLoss;  // kReadWrite only
  // How long a write waits for another connection's (process's) write lock before
  // failing with Unavailable.
  int busy_timeout_ms = 10000;
};

// A Store is the RecordSink of local sweeps (`fusetune sweep`): trials, best configs and
// the trials of a resumed run all come from and go to this database.
class Store : public RecordSink {
 public:
  // Opens the database at `path` (a file name; ":memory:" works for kReadWrite).
  //
  // kReadWrite: creates the file if absent and migrates it to LatestSchemaVersion().
  // kReadOnly: NotFound ("no database at PATH") when the file does not exist; reads through
  // a WAL that another process is writing. Where SQLite cannot create <db>-shm (the directory
  // is read-only for this process) and no <db>-wal content is pending, the file is opened
  // immutable (SQLite then takes no locks; a writer must not start while this Store is open).
  // FailedPrecondition when pending <db>-wal content cannot be read without write access
  // (the message says how to fold it into the file), or when the schema is not this
  // binary's: older (a writing open upgrades it) or absent (not a fusetune database).
  //
  // Both: InvalidArgument for an empty path; FailedPrecondition if the schema is newer than
  // this binary knows (nothing is changed); DataLoss for a file that is not an SQLite
  // database or is damaged; other SQLite failures as mapped in db/README.md. Every message
  // names the file and says what to do.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path,
                                                     const StoreOptions& options);
  ~Store() override;

  // Schema version this binary migrates to.
  static int LatestSchemaVersion();
  absl::StatusOr<int> SchemaVersion();

  // ---- runs
  // Inserts a run; returns its id (also written to info.run_id by callers).
  absl::StatusOr<int64_t> BeginRun(const RunInfo& info);
  absl::Status FinishRun(int64_t run_id);
  absl::StatusOr<RunInfo> GetRun(int64_t run_id);
  // The most recent unfinished run with the same commit, device class, and label; NotFound
  // if none. Used by sweeps to resume after a crash.
  absl::StatusOr<RunInfo> FindUnfinishedRun(std::string_view commit, std::string_view device_class,
                                            std::string_view label);

  // ---- commits (every column that names one: runs, best configs, regressions and their
  // baselines, jobs, audits, change points)
  // The distinct stored commits that start with `prefix` (compared as is: pass an
  // abbreviation as ParseCommitName lowercases it), sorted, at most `limit` (in [1, 100000],
  // else InvalidArgument, as for an empty prefix): what an abbreviation is resolved against
  // (ResolveCommitName) where the database is what knows the commit.
  absl::StatusOr<std::vector<std::string>> CommitsStartingWith(std::string_view prefix, int limit = 100);

  // ---- trials
  // Idempotent by trial_id. NotFound if the run does not exist. InvalidArgument (nothing
  // written) for empty keys, an unknown outcome or stage, a negative or non-finite wall time
  // or block number, or a trial_id that is not TrialId(run_id, problem_key, config_key,
  // attempt, stage).
  absl::Status RecordTrial(const Trial& trial) override;
  absl::Status RecordTrials(const std::vector<Trial>& trials);  // one transaction
  // Same as RecordTrials; returns how many of `trials` were new rows (the rest were
  // duplicates by trial_id, already stored). The service reports received vs inserted.
  absl::StatusOr<int> RecordTrialsCountingNew(const std::vector<Trial>& trials);
  // Number of trials stored for a run; NotFound if the run does not exist.
  absl::StatusOr<int64_t> CountTrials(int64_t run_id);
  // Trials of a run, optionally only one problem (empty = all), ordered by insertion.
  absl::StatusOr<std::vector<Trial>> ListTrials(int64_t run_id, std::string_view problem_key = {});
  // The sink's view of a run: ListTrials(run_id) (NotFound if the run does not exist).
  absl::StatusOr<std::vector<Trial>> RecordedTrials(int64_t run_id) override;
  // Trials for a problem on a device class across runs (newest first), at most `limit`.
  absl::StatusOr<std::vector<Trial>> ListTrialsForProblem(std::string_view device_class,
                                                          std::string_view problem_key,
                                                          int limit);
  absl::StatusOr<bool> HasTrial(std::string_view trial_id);

  // ---- best configs
  // Inserts or replaces the best config of (device class, problem key). InvalidArgument
  // (nothing written) for an empty key or a negative run id or time; NotFound if run_id is
  // set and the run does not exist. updated_unix_ms 0 is stored as now.
  absl::Status UpsertBestConfig(const BestConfig& best);
  // The sink's write of a sweep's pick: UpsertBestConfig.
  absl::Status RecordBestConfig(const BestConfig& best) override;
  // NotFound when none recorded.
  absl::StatusOr<BestConfig> GetBestConfig(std::string_view device_class, std::string_view problem_key);
  // All best configs, optionally restricted to one device class; ordered by problem key.
  absl::StatusOr<std::vector<BestConfig>> ListBestConfigs(std::string_view device_class = {});

  // ---- regressions
  // Inserts one verdict; returns its id. InvalidArgument (nothing written) as
  // RecordRegressions says.
  absl::StatusOr<int64_t> RecordRegression(const Regression& r);
  // Inserts verdicts in one transaction, all or nothing; returns how many were written.
  // InvalidArgument, naming the row index, for an empty commit, baseline commit, device class,
  // problem key, config key or metric, a verdict outside kRegressionVerdicts, a non-finite
  // ratio, a p-value outside [0, 1] or a negative time. created_unix_ms 0 is stored as now.
  absl::StatusOr<int> RecordRegressions(const std::vector<Regression>& rows);
  // Newest first; commit empty = all commits. limit in [1, 100000] else InvalidArgument.
  absl::StatusOr<std::vector<Regression>> ListRegressions(std::string_view commit = {}, int limit = 1000);

  // ---- audits (AuditSummary: a recorded best re-measured against its whole space)
  // Inserts one audit; returns its audit_id. InvalidArgument for an empty device class,
  // problem key or config key, or a negative count; NotFound if run_id is set and the run
  // does not exist.
  absl::StatusOr<int64_t> RecordAudit(const AuditSummary& audit);
  // Newest first; empty filters match all. limit in [1, 100000] else InvalidArgument.
  absl::StatusOr<std::vector<AuditSummary>> ListAudits(std::string_view device_class = {},
                                                       std::string_view problem_key = {},
                                                       int limit = 1000);

  // ---- bench cells (one bench run = a run whose cells are in bench_cells)
  // Records the cells of run `run_id` in one transaction, all or nothing. A cell already
  // stored for (run, problem, config, role) is replaced (a re-measured cell) and keeps its
  // place in insertion order; so is an earlier cell of the same call with that identity.
  // NotFound if the run does not exist. InvalidArgument (nothing written) for a
  // non-positive run id, a cell whose run_id is neither 0 nor `run_id`, an empty suite,
  // problem key, problem JSON, config key or role, an unknown outcome, a negative or
  // non-finite error or tolerance, a block whose median_us is not finite and > 0 or whose
  // sample count or device state is negative, or a negative time. An empty list is OK.
  absl::Status RecordBenchCells(int64_t run_id, const std::vector<BenchCell>& cells);
  // The cells of a run in insertion order; NotFound if the run does not exist.
  absl::StatusOr<std::vector<BenchCell>> ListBenchCells(int64_t run_id);
  // Finished runs holding cells of `suite` on `device_class` (empty = any device class),
  // newest first (finish time, then run id), at most `limit`. InvalidArgument for an empty
  // suite or a limit outside [1, 100000]; an empty list when none.
  absl::StatusOr<std::vector<RunInfo>> ListBenchRuns(std::string_view suite, std::string_view device_class,
                                                     int limit);
  // The suites that have bench cells, sorted by name; an empty list when none.
  absl::StatusOr<std::vector<std::string>> ListBenchSuites();
  // The newest finished bench run of `suite` on `device_class` (empty = any) at `commit`,
  // compared by equality: a canonical commit name (fusetune/records/commit.h), abbreviations
  // resolved by the caller (CommitsStartingWith). InvalidArgument for an empty suite or
  // commit. NotFound when none matches: the message names the suite, device class and commit
  // and lists up to 5 commits that the suite has runs of (or the device classes it has runs on).
  absl::StatusOr<RunInfo> FindBenchRun(std::string_view suite, std::string_view device_class,
                                       std::string_view commit);

  // ---- change points (ChangePointRow: a cell's history, as last detected)
  // Replaces every stored change point of the cell (device_class, suite, problem_key,
  // config_key) by `rows`, in one transaction; an empty list clears the cell. Each row's
  // identity fields may be empty (filled in) or must equal the arguments. InvalidArgument
  // (nothing written) for an empty argument, a row naming another cell, an empty commit, a
  // negative position or two rows at one position, a mean that is not finite and > 0, a
  // ratio that is not finite and > 0, a p-value outside [0, 1], a direction other than
  // "slower"/"faster", or a negative time.
  absl::Status ReplaceChangePoints(std::string_view device_class, std::string_view suite,
                                   std::string_view problem_key, std::string_view config_key,
                                   const std::vector<ChangePointRow>& rows);
  // Newest detection first, then by cell and position; at most `limit` rows (in [1, 100000],
  // else InvalidArgument). An empty list when none match.
  absl::StatusOr<std::vector<ChangePointRow>> ListChangePoints(const ChangePointFilter& filter, int limit = 1000);

  // ---- workers
  absl::Status UpsertWorker(const WorkerRecord& w);
  absl::Status TouchWorker(std::string_view worker_id, int64_t now_unix_ms);
  absl::StatusOr<std::vector<WorkerRecord>> ListWorkers();

  // ---- jobs (state machine: queued -> leased -> done | failed; leased -> queued on expiry)
  absl::StatusOr<int64_t> EnqueueJob(const Job& job);
  absl::StatusOr<Job> GetJob(int64_t job_id);
  // Newest first (highest job_id); limit in [1, 100000] else InvalidArgument.
  absl::StatusOr<std::vector<Job>> ListJobs(std::optional<JobState> state = std::nullopt, int limit = 1000);
  // Atomically: returns expired leases to the queue, then leases the oldest queued job for
  // `device_class` to `worker_id` until now + lease_ms. NotFound when none is queued.
  absl::StatusOr<Job> LeaseJob(std::string_view worker_id, std::string_view device_class,
                               int64_t now_unix_ms, int64_t lease_ms);
  // Extends the lease; FailedPrecondition if the job is no longer leased by this worker. A
  // lease past its expiry that no LeaseJob/ExpireLeases has reclaimed yet is still held.
  // (Same for CompleteJob and ReleaseJob.)
  absl::Status RenewLease(int64_t job_id, std::string_view worker_id, int64_t now_unix_ms, int64_t lease_ms);
  // Sets the run a leased job writes to (first lease creates it).
  absl::Status SetJobRun(int64_t job_id, int64_t run_id);
  // Completes a leased job exactly once: OK the first time (for the leasing worker), OK and
  // no change when already done by the same worker (a retry), FailedPrecondition otherwise.
  absl::Status CompleteJob(int64_t job_id, std::string_view worker_id, bool success,
                           std::string_view error, int64_t now_unix_ms);
  // Returns a leased job to the queue (worker shutting down). FailedPrecondition if not held.
  absl::Status ReleaseJob(int64_t job_id, std::string_view worker_id);
  // Returns every expired lease to the queue; the number returned.
  absl::StatusOr<int> ExpireLeases(int64_t now_unix_ms);
  // Count of jobs per state.
  absl::StatusOr<std::vector<std::pair<JobState, int64_t>>> CountJobsByState();

 private:
  class Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fusetune

#endif  // FUSETUNE_DB_STORE_H_
