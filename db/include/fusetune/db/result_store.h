// ResultStore: the part of a Store that keeps what sweeps and audits produce: runs, the
// commits they name, trials, best configs and audits. Backend-independent (no SQL types); the
// SQL Store implements it over SQLite or PostgreSQL (db/src/sql_store.h).
#ifndef FUSETUNE_DB_RESULT_STORE_H_
#define FUSETUNE_DB_RESULT_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/records/run.h"
#include "fusetune/records/sink.h"
#include "fusetune/records/trial.h"

namespace fusetune {

// What every method means, whatever the backend: validation failures are InvalidArgument
// naming the field, before anything is written (db/src/store_validation.h holds the shared
// checks); a write either fully happens or not at all.
//
// Thread-safety: implementations are thread-safe.
class ResultStore : public RecordSink {
 public:
  virtual ~ResultStore() = default;

  // ---- runs
  // Inserts a run; returns its id (also written to info.run_id by callers).
  virtual absl::StatusOr<int64_t> BeginRun(const RunInfo& info) = 0;
  // Marks the run finished now (a second finish keeps the first time). NotFound if the run
  // does not exist; InvalidArgument for a non-positive id.
  virtual absl::Status FinishRun(int64_t run_id) = 0;
  // NotFound if the run does not exist; InvalidArgument for a non-positive id.
  virtual absl::StatusOr<RunInfo> GetRun(int64_t run_id) = 0;
  // The most recent unfinished run with the same commit, device class, and label; NotFound
  // if none. Used by sweeps to resume after a crash.
  virtual absl::StatusOr<RunInfo> FindUnfinishedRun(std::string_view commit, std::string_view device_class,
                                                    std::string_view label) = 0;

  // ---- commits (every column that names one: runs, best configs, regressions and their
  // baselines, jobs, audits, change points)
  // The distinct stored commits that start with `prefix` (compared as is: pass an
  // abbreviation as ParseCommitName lowercases it), sorted, at most `limit` (in [1, 100000],
  // else InvalidArgument, as for an empty prefix): what an abbreviation is resolved against
  // (ResolveCommitName) where the database is what knows the commit.
  virtual absl::StatusOr<std::vector<std::string>> CommitsStartingWith(std::string_view prefix, int limit = 100) = 0;

  // ---- trials
  // Idempotent by trial_id. NotFound if the run does not exist. InvalidArgument (nothing
  // written) for empty keys, an unknown outcome or stage, a negative or non-finite wall time
  // or block number, or a trial_id that is not TrialId(run_id, problem_key, config_key,
  // attempt, stage).
  // Records `trials` in one transaction; returns how many were new rows (the rest were
  // duplicates by trial_id, already stored). The service reports received vs inserted.
  virtual absl::StatusOr<int> RecordTrialsCountingNew(const std::vector<Trial>& trials) = 0;
  // RecordTrialsCountingNew without the count; an implementation writes trials in that one
  // method, and these follow from it.
  absl::Status RecordTrials(const std::vector<Trial>& trials) { return RecordTrialsCountingNew(trials).status(); }
  absl::Status RecordTrial(const Trial& trial) final { return RecordTrialsCountingNew({trial}).status(); }
  // Number of trials stored for a run; NotFound if the run does not exist.
  virtual absl::StatusOr<int64_t> CountTrials(int64_t run_id) = 0;
  // Trials of a run, optionally only one problem (empty = all), ordered by insertion.
  virtual absl::StatusOr<std::vector<Trial>> ListTrials(int64_t run_id, std::string_view problem_key = {}) = 0;
  // The sink's view of a run: ListTrials(run_id) (NotFound if the run does not exist).
  absl::StatusOr<std::vector<Trial>> RecordedTrials(int64_t run_id) final { return ListTrials(run_id, {}); }
  // Trials for a problem on a device class across runs (newest first), at most `limit`.
  virtual absl::StatusOr<std::vector<Trial>> ListTrialsForProblem(std::string_view device_class,
                                                                  std::string_view problem_key,
                                                                  int limit) = 0;
  // Whether a trial with that id is stored. InvalidArgument for an empty id.
  virtual absl::StatusOr<bool> HasTrial(std::string_view trial_id) = 0;

  // ---- best configs
  // Inserts or replaces the best config of (device class, problem key). InvalidArgument
  // (nothing written) for an empty key or a negative run id or time; NotFound if run_id is
  // set and the run does not exist. updated_unix_ms 0 is stored as now.
  virtual absl::Status UpsertBestConfig(const BestConfig& best) = 0;
  // The sink's write of a sweep's pick: UpsertBestConfig.
  absl::Status RecordBestConfig(const BestConfig& best) final { return UpsertBestConfig(best); }
  // NotFound when none recorded.
  virtual absl::StatusOr<BestConfig> GetBestConfig(std::string_view device_class, std::string_view problem_key) = 0;
  // All best configs, optionally restricted to one device class; ordered by problem key.
  virtual absl::StatusOr<std::vector<BestConfig>> ListBestConfigs(std::string_view device_class = {}) = 0;

  // ---- audits (AuditSummary: a recorded best re-measured against its whole space)
  // Inserts one audit; returns its audit_id. InvalidArgument for an empty device class,
  // problem key or config key, or a negative count; NotFound if run_id is set and the run
  // does not exist.
  virtual absl::StatusOr<int64_t> RecordAudit(const AuditSummary& audit) = 0;
  // Newest first; empty filters match all. limit in [1, 100000] else InvalidArgument.
  virtual absl::StatusOr<std::vector<AuditSummary>> ListAudits(std::string_view device_class = {},
                                                               std::string_view problem_key = {},
                                                               int limit = 1000) = 0;
};

}  // namespace fusetune

#endif  // FUSETUNE_DB_RESULT_STORE_H_
