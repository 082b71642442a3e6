#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "fusetune/base/time.h"
#include "fusetune/db/store.h"
#include "sqlite.h"
#include "store_internal.h"

// The bench_cells table: the measured cells of bench runs, and finding the runs of a suite
// by device class and commit (what a regression check compares against).

namespace fusetune {

using db_internal::BlocksFromJson;
using db_internal::BlocksToJson;
using db_internal::CheckRunExists;
using db_internal::Connection;
using db_internal::kRunColumns;
using db_internal::ReadRows;
using db_internal::ReadRun;
using db_internal::RequireLimit;
using db_internal::RequireNonEmpty;
using db_internal::RequirePositiveId;
using db_internal::SamplesToJson;
using db_internal::Statement;

std::vector<double> BenchCell::SamplesUs() const {
  std::vector<double> out;
  out.reserve(blocks.size());
  for (const SampleBlock& b : blocks) out.push_back(b.median_us);
  return out;
}

namespace {

absl::Status ValidateBenchCell(int64_t run_id, const BenchCell& cell, size_t index) {
  const std::string what = absl::StrCat("bench cell ", index);
  if (cell.run_id != 0 && cell.run_id != run_id) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has run_id ", cell.run_id, " but is recorded for run ", run_id));
  }
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(cell.suite, what + " suite"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(cell.problem_key, what + " problem_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(cell.problem_json, what + " problem_json"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(cell.config_key, what + " config_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(cell.role, what + " role"));
  if (TrialOutcomeName(cell.outcome) == "?") return absl::InvalidArgumentError(what + ": unknown outcome");
  for (const auto& [name, value] : {std::pair<const char*, double>{"max_abs_error", cell.max_abs_error},
                                    {"max_rel_error", cell.max_rel_error},
                                    {"tolerance", cell.tolerance}}) {
    if (!std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, " ", name, " must be finite and >= 0, got ", value));
    }
  }
  if (cell.created_unix_ms < 0) return absl::InvalidArgumentError(what + " created_unix_ms must be >= 0");
  return db_internal::ValidateBlocks(cell.blocks, what, /*require_positive_median=*/true);
}

constexpr char kBenchCellColumns[] =
    "run_id, suite, problem_key, problem_json, config_key, role, outcome, message, max_abs_error, "
    "max_rel_error, tolerance, blocks_json, created_unix_ms";

absl::StatusOr<BenchCell> ReadBenchCell(const Statement& s) {
  BenchCell c;
  c.run_id = s.Int64(0);
  c.suite = s.Text(1);
  c.problem_key = s.Text(2);
  c.problem_json = s.Text(3);
  c.config_key = s.Text(4);
  c.role = s.Text(5);
  absl::StatusOr<TrialOutcome> outcome = ParseTrialOutcome(s.Text(6));
  if (!outcome.ok()) return absl::DataLossError(outcome.status().message());
  c.outcome = *outcome;
  c.message = s.Text(7);
  c.max_abs_error = s.Double(8);
  c.max_rel_error = s.Double(9);
  c.tolerance = s.Double(10);
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
  s.Bind(1, suite).Bind(2, device_class).Bind(3, limit);
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

absl::Status Store::RecordBenchCells(int64_t run_id, const std::vector<BenchCell>& cells) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  for (size_t i = 0; i < cells.size(); ++i) FT_DB_RETURN_IF_ERROR(ValidateBenchCell(run_id, cells[i], i));
  absl::MutexLock lock(&impl_->mu);
  return impl_->WriteTransaction([&](Connection& c) -> absl::Status {
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
      s.Bind(1, run_id)
          .Bind(2, cell.suite)
          .Bind(3, cell.problem_key)
          .Bind(4, cell.problem_json)
          .Bind(5, cell.config_key)
          .Bind(6, cell.role)
          .Bind(7, TrialOutcomeName(cell.outcome))
          .Bind(8, cell.message)
          .Bind(9, cell.max_abs_error)
          .Bind(10, cell.max_rel_error)
          .Bind(11, cell.tolerance)
          .Bind(12, SamplesToJson(cell.SamplesUs()))
          .Bind(13, BlocksToJson(cell.blocks))
          .Bind(14, cell.created_unix_ms != 0 ? cell.created_unix_ms : now);
      FT_DB_RETURN_IF_ERROR(s.Run());
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<BenchCell>> Store::ListBenchCells(int64_t run_id) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  absl::MutexLock lock(&impl_->mu);
  std::vector<BenchCell> out;
  FT_DB_RETURN_IF_ERROR(impl_->ReadTransaction([&](Connection& c) -> absl::Status {
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

absl::StatusOr<std::vector<RunInfo>> Store::ListBenchRuns(std::string_view suite, std::string_view device_class,
                                                          int limit) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(suite, "suite"));
  FT_DB_RETURN_IF_ERROR(RequireLimit(limit));
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(absl::StrCat("SELECT ", kRunColumns, kFinishedBenchRuns,
                                                                        kNewestFirst, " LIMIT ?3")));
  s.Bind(1, suite).Bind(2, device_class).Bind(3, limit);
  return ReadRows<RunInfo>(s, ReadRun);
}

absl::StatusOr<std::vector<std::string>> Store::ListBenchSuites() {
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare("SELECT DISTINCT suite FROM bench_cells ORDER BY suite"));
  return ReadRows<std::string>(s, [](const Statement& row) { return row.Text(0); });
}

absl::StatusOr<RunInfo> Store::FindBenchRun(std::string_view suite, std::string_view device_class,
                                            std::string_view commit) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(suite, "suite"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(commit, "commit"));
  absl::MutexLock lock(&impl_->mu);
  RunInfo found;
  FT_DB_RETURN_IF_ERROR(impl_->ReadTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(Statement s, c.Prepare(absl::StrCat("SELECT ", kRunColumns, kFinishedBenchRuns,
                                                               " AND commit_hash = ?3", kNewestFirst, " LIMIT 1")));
    s.Bind(1, suite).Bind(2, device_class).Bind(3, commit);
    FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return NoBenchRunFor(c, suite, device_class, commit);
    FT_DB_ASSIGN_OR_RETURN(found, ReadRun(s));
    return absl::OkStatus();
  }));
  return found;
}

}  // namespace fusetune
