// What `bench --suite` and `regress` store and read back: a suite's measured cells as the
// store's bench cells, and stored bench cells as the baseline side of a comparison.
#ifndef FUSETUNE_SERVICE_CLI_BENCH_RECORDS_H_
#define FUSETUNE_SERVICE_CLI_BENCH_RECORDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/bench/compare.h"
#include "fusetune/bench/suite.h"
#include "fusetune/db/store.h"

namespace fusetune::cli {

// One measured cell as a store row of `suite` in run `run_id`.
BenchCell ToBenchCell(const bench::Suite& suite, int64_t run_id, const bench::SuiteCell& cell,
                      const bench::CellMeasurement& measurement);
// A stored row as the baseline of a comparison.
bench::StoredCell ToStoredCell(const BenchCell& row);

// Records `cells`, measured by `source`, as a finished bench run of `suite` (label
// Suite::RunLabel()); returns its run id. The run stays unfinished (and is never taken as a
// baseline) when recording the cells fails.
absl::StatusOr<int64_t> StoreBenchRun(Store& store, const bench::Suite& suite, const bench::SourceInfo& source,
                                      const std::vector<bench::MeasuredCell>& cells);

// The median of a measurement's block medians (0 without blocks), microseconds.
double MedianOfBlocks(const bench::CellMeasurement& measurement);

}  // namespace fusetune::cli

#endif  // FUSETUNE_SERVICE_CLI_BENCH_RECORDS_H_
