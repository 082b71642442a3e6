// BenchHistoryStore: the part of a Store that keeps the regression history: bench cells of
// bench runs, regression verdicts and the change points of each cell's per-commit history.
// Backend-independent (no SQL types).
#ifndef FUSETUNE_DB_BENCH_HISTORY_STORE_H_
#define FUSETUNE_DB_BENCH_HISTORY_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/records/bench_cell.h"
#include "fusetune/records/change_point.h"
#include "fusetune/records/regression.h"
#include "fusetune/records/run.h"

namespace fusetune {

// Bench runs are runs of a ResultStore whose id has cells here.
//
// Thread-safety: implementations are thread-safe.
class BenchHistoryStore {
 public:
  virtual ~BenchHistoryStore() = default;

  // ---- regressions
  // Inserts one verdict; returns its id. InvalidArgument (nothing written) as
  // RecordRegressions says.
  virtual absl::StatusOr<int64_t> RecordRegression(const Regression& r) = 0;
  // Inserts verdicts in one transaction, all or nothing; returns how many were written.
  // InvalidArgument, naming the row index, for an empty commit, baseline commit, device class,
  // problem key, config key or metric, a verdict outside kRegressionVerdicts, a non-finite
  // ratio, a p-value outside [0, 1] or a negative time. created_unix_ms 0 is stored as now.
  virtual absl::StatusOr<int> RecordRegressions(const std::vector<Regression>& rows) = 0;
  // Newest first; commit empty = all commits. limit in [1, 100000] else InvalidArgument.
  virtual absl::StatusOr<std::vector<Regression>> ListRegressions(std::string_view commit = {}, int limit = 1000) = 0;

  // ---- bench cells (one bench run = a run whose cells are in bench_cells)
  // Records the cells of run `run_id` in one transaction, all or nothing. A cell already
  // stored for (run, problem, config, role) is replaced (a re-measured cell) and keeps its
  // place in insertion order; so is an earlier cell of the same call with that identity.
  // NotFound if the run does not exist. InvalidArgument (nothing written) for a
  // non-positive run id, a cell whose run_id is neither 0 nor `run_id`, an empty suite,
  // problem key, problem JSON, config key or role, an unknown outcome, a negative or
  // non-finite error or tolerance, a block whose median_us is not finite and > 0 or whose
  // sample count or device state is negative, or a negative time. An empty list is OK.
  virtual absl::Status RecordBenchCells(int64_t run_id, const std::vector<BenchCell>& cells) = 0;
  // The cells of a run in insertion order; NotFound if the run does not exist.
  virtual absl::StatusOr<std::vector<BenchCell>> ListBenchCells(int64_t run_id) = 0;
  // Finished runs holding cells of `suite` on `device_class` (empty = any device class),
  // newest first (finish time, then run id), at most `limit`. InvalidArgument for an empty
  // suite or a limit outside [1, 100000]; an empty list when none.
  virtual absl::StatusOr<std::vector<RunInfo>> ListBenchRuns(std::string_view suite, std::string_view device_class,
                                                             int limit) = 0;
  // The suites that have bench cells, sorted by name; an empty list when none.
  virtual absl::StatusOr<std::vector<std::string>> ListBenchSuites() = 0;
  // The newest finished bench run of `suite` on `device_class` (empty = any) at `commit`,
  // compared by equality: a canonical commit name (fusetune/records/commit.h), abbreviations
  // resolved by the caller (CommitsStartingWith). InvalidArgument for an empty suite or
  // commit. NotFound when none matches: the message names the suite, device class and commit
  // and lists up to 5 commits that the suite has runs of (or the device classes it has runs on).
  virtual absl::StatusOr<RunInfo> FindBenchRun(std::string_view suite, std::string_view device_class,
                                               std::string_view commit) = 0;

  // ---- change points (ChangePointRow: a cell's history, as last detected)
  // Replaces every stored change point of the cell (device_class, suite, problem_key,
  // config_key) by `rows`, in one transaction; an empty list clears the cell. Each row's
  // identity fields may be empty (filled in) or must equal the arguments. InvalidArgument
  // (nothing written) for an empty argument, a row naming another cell, an empty commit, a
  // negative position or two rows at one position, a mean that is not finite and > 0, a
  // ratio that is not finite and > 0, a p-value outside [0, 1], a direction other than
  // "slower"/"faster", or a negative time.
  virtual absl::Status ReplaceChangePoints(std::string_view device_class, std::string_view suite,
                                           std::string_view problem_key, std::string_view config_key,
                                           const std::vector<ChangePointRow>& rows) = 0;
  // Newest detection first, then by cell and position; at most `limit` rows (in [1, 100000],
  // else InvalidArgument). An empty list when none match.
  virtual absl::StatusOr<std::vector<ChangePointRow>> ListChangePoints(const ChangePointFilter& filter,
                                                                      int limit = 1000) = 0;
};

}  // namespace fusetune

#endif  // FUSETUNE_DB_BENCH_HISTORY_STORE_H_
