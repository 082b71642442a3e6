#include "fusetune/regress/bench_records.h"

#include <algorithm>
#include <cmath>

#include "fusetune/base/median.h"
#include "fusetune/base/time.h"
#include "fusetune/regress/stats.h"

namespace fusetune::regress {

BenchCell ToBenchCell(const Suite& suite, int64_t run_id, const SuiteCell& cell,
                      const CellMeasurement& measurement) {
  BenchCell row;
  row.run_id = run_id;
  row.suite = suite.name;
  row.problem_key = cell.problem.Key();
  row.problem_json = ProblemToJson(cell.problem);
  row.config_key = cell.config.Key();
  row.role = cell.role;
  row.outcome = measurement.check.outcome;
  row.message = measurement.check.message;
  // A failed verification can leave a non-finite error; the store keeps errors finite and the
  // message says what failed.
  auto finite = [](double v) { return std::isfinite(v) && v >= 0 ? v : 0.0; };
  row.max_abs_error = finite(measurement.check.max_abs_error);
  row.max_rel_error = finite(measurement.check.max_rel_error);
  row.tolerance = finite(measurement.check.tolerance);
  row.blocks = measurement.blocks;
  row.created_unix_ms = NowUnixMs();
  return row;
}

StoredCell ToStoredCell(const BenchCell& row) {
  StoredCell cell;
  cell.problem_key = row.problem_key;
  cell.config_key = row.config_key;
  cell.role = row.role;
  cell.measurement.check.outcome = row.outcome;
  cell.measurement.check.message = row.message;
  cell.measurement.check.max_abs_error = row.max_abs_error;
  cell.measurement.check.max_rel_error = row.max_rel_error;
  cell.measurement.check.tolerance = row.tolerance;
  cell.measurement.blocks = row.blocks;
  return cell;
}

absl::StatusOr<int64_t> StoreBenchRun(Store& store, const Suite& suite, const RunInfo& run,
                                      const std::vector<MeasuredCell>& cells) {
  absl::StatusOr<int64_t> run_id = store.BeginRun(run);
  if (!run_id.ok()) return run_id.status();
  std::vector<BenchCell> rows;
  for (const MeasuredCell& c : cells) rows.push_back(ToBenchCell(suite, *run_id, c.cell, c.measurement));
  if (absl::Status s = store.RecordBenchCells(*run_id, rows); !s.ok()) return s;
  if (absl::Status s = store.FinishRun(*run_id); !s.ok()) return s;
  return *run_id;
}

double MedianOfBlocks(const CellMeasurement& measurement) {
  return measurement.blocks.empty() ? 0 : Median(measurement.Medians());
}

}  // namespace fusetune::regress
