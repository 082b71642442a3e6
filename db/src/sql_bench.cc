#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "fusetune/base/time.h"
#include "fusetune/db/store.h"
#include "sql.h"
#include "sql_rows.h"
#include "sql_store.h"

// The bench_cells table: the measured cells of bench runs, and finding the runs of a suite
// by device class and commit (what a regression check compares against).

namespace fusetune::db_internal {

namespace {

constexpr char kBenchCellColumns[] =
    "run_id, suite, problem_key, problem_json, config_key, role, outcome, message, max_abs_error, "
    "max_rel_error, tolerance, blocks_json, created_unix_ms";

absl::StatusOr<BenchCell> ReadBenchCell(const Statement& s) {
  BenchCell c;
  s.ReadColumns(0, &c.run_id, &c.suite, &c.problem_key, &c.problem_json, &c.config_key, &c.role);
  absl::StatusOr<TrialOutcome> outcome = ParseTrialOutcome(s.Text(6));
  if (!outcome.ok()) return absl::DataLossError(outcome.status().message());
  c.outcome = *outcome;
  s.ReadColumns(7, &c.message, &c.max_abs_error, &c.max_rel_error, &c.tolerance);
  if (!s.IsNull(11)) {
    FT_DB_ASSIGN_OR_RETURN(c.blocks, BlocksFromJson(s.Text(11)));
  }
  c.created_unix_ms = s.Int64(12);
  return c;
}

// The finished runs holding cells of `suite` (?1) on `device_class` (?2, empty = any), as a
// FROM ... WHERE clause; callers append further conditions (AND ...) and their order.
constexpr char kFinishedBenchRuns[] =
    " FROM runs WHERE finished_unix_ms > 0 AND (?2 = '' OR device_class = ?2) "
    "AND EXISTS (SELECT 1 FROM bench_cells b WHERE b.suite = ?1 AND b.run_id = runs.run_id)";
constexpr char kNewestFirst[] = " ORDER BY finished_unix_ms DESC, run_id DESC";

// The distinct values of one column (`column`, of runs) over the finished bench runs of
// `suite` on `device_class`, newest first, at most `limit`.
absl::StatusOr<std::vector<std::string>> DistinctOfBenchRuns(Connection& c, std::string_view column,
                                                             std::string_view suite,
                                                             std::string_view device_class, int limit) {
  const std::string name(column);
  FT_DB_ASSIGN_OR_RETURN(Statement s, c.Prepare(absl::StrCat("SELECT ", name, kFinishedBenchRuns, " GROUP BY ", name,
                                                             " ORDER BY MAX(finished_unix_ms) DESC, "
                                                             "MAX(run_id) DESC LIMIT ?3")));
  s.BindAll(suite, device_class, limit);
  return ReadRows<std::string>(s, [](const Statement& row) { return row.Text(0); });
}

// NotFound for FindBenchRun, saying what does exist so that a mistyped commit or a baseline
// from another device class is told apart from a suite never benched.
absl::Status NoBenchRunFor(Connection& c, std::string_view suite, std::string_view device_class,
                           std::string_view commit) {
  const std::string on = device_class.empty() ? std::string("any device class")
                                              : absl::StrCat("device class '", std::string(device_class), "'");
  const std::string head =
      absl::StrCat("no finished bench run of suite '", std::string(suite), "' on ", on, " at commit '",
                   std::string(commit), "'");
  FT_DB_ASSIGN_OR_RETURN(std::vector<std::string> commits,
                         DistinctOfBenchRuns(c, "commit_hash", suite, device_class, 5));
  if (!commits.empty()) {
    return absl::NotFoundError(
        absl::StrCat(head, "; its commits there (newest first): ", absl::StrJoin(commits, ", ")));
  }
  FT_DB_ASSIGN_OR_RETURN(std::vector<std::string> classes, DistinctOfBenchRuns(c, "device_class", suite, "", 5));
  if (!classes.empty()) {
    return absl::NotFoundError(
        absl::StrCat(head, "; the suite has no runs on ", on, ", only on: ", absl::StrJoin(classes, ", ")));
  }
  return absl::NotFoundError(absl::StrCat(head, "; the database holds no finished bench run of this suite"));
}

}  // namespace

absl::Status SqlStore::RecordBenchCells(int64_t run_id, const std::vector<BenchCell>& cells) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  for (size_t i = 0; i < cells.size(); ++i) FT_DB_RETURN_IF_ERROR(ValidateBenchCell(run_id, cells[i], i));
  absl::MutexLock lock(&mu_);
  return WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_RETURN_IF_ERROR(CheckRunExists(c, run_id));
    const int64_t now = NowUnixMs();
    for (const BenchCell& cell : cells) {
      // DO UPDATE (not INSERT OR REPLACE): the row keeps its id, so its place in the run.
      FT_DB_ASSIGN_OR_RETURN(
          Statement s,
          c.Prepare("INSERT INTO bench_cells (run_id, suite, problem_key, problem_json, config_key, role, "
                    "outcome, message, max_abs_error, max_rel_error, tolerance, samples_us_json, "
                    "blocks_json, created_unix_ms) "
                    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) "
                    "ON CONFLICT (run_id, problem_key, config_key, role) DO UPDATE SET "
                    "suite = excluded.suite, problem_json = excluded.problem_json, "
                    "outcome = excluded.outcome, message = excluded.message, "
                    "max_abs_error = excluded.max_abs_error, max_rel_error = excluded.max_rel_error, "
                    "tolerance = excluded.tolerance, samples_us_json = excluded.samples_us_json, "
                    "blocks_json = excluded.blocks_json, created_unix_ms = excluded.created_unix_ms"));
      s.BindAll(run_id, cell.suite, cell.problem_key, cell.problem_json, cell.config_key, cell.role,
                TrialOutcomeName(cell.outcome), cell.message, cell.max_abs_error, cell.max_rel_error,
                cell.tolerance, SamplesToJson(cell.SamplesUs()), BlocksToJson(cell.blocks),
                cell.created_unix_ms != 0 ? cell.created_unix_ms : now);
      FT_DB_RETURN_IF_ERROR(s.Run());
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<BenchCell>> SqlStore::ListBenchCells(int64_t run_id) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  absl::MutexLock lock(&mu_);
  std::vector<BenchCell> out;
  FT_DB_RETURN_IF_ERROR(ReadTransaction([&](Connection& c) -> absl::Status {
    FT_DB_RETURN_IF_ERROR(CheckRunExists(c, run_id));
    FT_DB_ASSIGN_OR_RETURN(Statement s, c.Prepare(absl::StrCat("SELECT ", kBenchCellColumns,
                                                               " FROM bench_cells WHERE run_id = ?1 "
                                                               "ORDER BY bench_cell_id")));
    s.Bind(1, run_id);
    FT_DB_ASSIGN_OR_RETURN(out, ReadRows<BenchCell>(s, ReadBenchCell));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<RunInfo>> SqlStore::ListBenchRuns(std::string_view suite, std::string_view device_class,
                                                          int limit) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(suite, "suite"));
  FT_DB_RETURN_IF_ERROR(RequireLimit(limit));
  return SelectRows<RunInfo>(absl::StrCat("SELECT ", kRunColumns, kFinishedBenchRuns, kNewestFirst, " LIMIT ?3"),
                             ReadRun, suite, device_class, limit);
}

absl::StatusOr<std::vector<std::string>> SqlStore::ListBenchSuites() {
  absl::MutexLock lock(&mu_);
  FT_DB_ASSIGN_OR_RETURN(Statement s, conn_->Prepare("SELECT DISTINCT suite FROM bench_cells ORDER BY suite"));
  return ReadRows<std::string>(s, [](const Statement& row) { return row.Text(0); });
}

absl::StatusOr<RunInfo> SqlStore::FindBenchRun(std::string_view suite, std::string_view device_class,
                                            std::string_view commit) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(suite, "suite"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(commit, "commit"));
  absl::MutexLock lock(&mu_);
  RunInfo found;
  FT_DB_RETURN_IF_ERROR(ReadTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(Statement s, c.Prepare(absl::StrCat("SELECT ", kRunColumns, kFinishedBenchRuns,
                                                               " AND commit_hash = ?3", kNewestFirst, " LIMIT 1")));
    s.BindAll(suite, device_class, commit);
    FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return NoBenchRunFor(c, suite, device_class, commit);
    FT_DB_ASSIGN_OR_RETURN(found, ReadRun(s));
    return absl::OkStatus();
  }));
  return found;
}

}  // namespace fusetune::db_internal
