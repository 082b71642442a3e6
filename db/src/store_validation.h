// The backend-independent input checks of a Store: what every implementation (SQLite today)
// refuses before it writes or reads anything, with the same InvalidArgument messages naming
// the field, so that two backends refuse exactly the same input. fusetune/db/store.h and its
// parts document, per method, what is refused; these functions are that one definition.
//
// Internal to db/: a second backend in this directory includes it; nothing outside does.
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_DB_SRC_STORE_VALIDATION_H_
#define FUSETUNE_DB_SRC_STORE_VALIDATION_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/records/bench_cell.h"
#include "fusetune/records/change_point.h"
#include "fusetune/records/job.h"
#include "fusetune/records/regression.h"
#include "fusetune/records/run.h"
#include "fusetune/records/trial.h"
#include "fusetune/records/worker.h"

namespace fusetune::db_internal {

// InvalidArgument "<what> must not be empty" when `value` is empty.
absl::Status RequireNonEmpty(std::string_view value, std::string_view what);
// InvalidArgument "<what> must be positive, got <id>" when `id` <= 0.
absl::Status RequirePositiveId(int64_t id, std::string_view what);
// Upper bound on any list a caller can ask for: keeps one call's memory bounded.
inline constexpr int kMaxListLimit = 100000;
// InvalidArgument unless `limit` is in [1, kMaxListLimit].
absl::Status RequireLimit(int limit);

// InvalidArgument "<what> block <i>: ..." unless every block has samples >= 0, device states
// with non-negative clock and power, and a finite median_us that is >= 0 (or > 0 when
// `require_positive_median`: a bench cell's block always timed something).
absl::Status ValidateBlocks(const std::vector<SampleBlock>& blocks, std::string_view what,
                            bool require_positive_median);

// A trial to record (ResultStore::RecordTrial): keys, outcome, stage, times, blocks, and a
// trial_id equal to TrialId(run_id, problem_key, config_key, attempt, stage).
absl::Status ValidateTrial(const Trial& t);
// A best config to upsert: non-empty keys, run id and time >= 0.
absl::Status ValidateBestConfig(const BestConfig& b);
// An audit to record: non-empty keys, counts, times and run id >= 0.
absl::Status ValidateAudit(const AuditSummary& a);
// Regressions to record together: ValidateRegression of each, the message prefixed
// "regression <index>: ".
absl::Status ValidateRegressions(const std::vector<Regression>& rows);
// Cell `index` of the cells recorded for run `run_id` (BenchHistoryStore::RecordBenchCells).
absl::Status ValidateBenchCell(int64_t run_id, const BenchCell& cell, size_t index);
// The rows ReplaceChangePoints stores for the cell (device_class, suite, problem_key,
// config_key): each row's empty identity fields filled in from the cell, every row checked
// (InvalidArgument naming the row), no two rows at one position.
absl::StatusOr<std::vector<ChangePointRow>> CompleteChangePoints(std::string_view device_class,
                                                                 std::string_view suite,
                                                                 std::string_view problem_key,
                                                                 std::string_view config_key,
                                                                 const std::vector<ChangePointRow>& rows);
// A worker to register: non-empty id and device class, times >= 0.
absl::Status ValidateWorker(const WorkerRecord& w);
// A job to enqueue: a device class, at least one problem and no empty key, budgets and time
// >= 0 and finite.
absl::Status ValidateNewJob(const Job& job);

}  // namespace fusetune::db_internal

#endif  // FUSETUNE_DB_SRC_STORE_VALIDATION_H_
