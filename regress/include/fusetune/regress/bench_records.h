// A suite's measured cells as the store's bench cells, and stored bench cells as the baseline
// side of a comparison: what `bench --suite` and `regress` store and read back.
//
// Thread-safety: the functions keep no state; StoreBenchRun is as safe as the Store it writes.
#ifndef FUSETUNE_REGRESS_BENCH_RECORDS_H_
#define FUSETUNE_REGRESS_BENCH_RECORDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/db/store.h"
#include "fusetune/regress/compare.h"
#include "fusetune/regress/suite.h"

namespace fusetune::regress {

// One measured cell as a store row of `suite` in run `run_id`.
BenchCell ToBenchCell(const Suite& suite, int64_t run_id, const SuiteCell& cell, const CellMeasurement& measurement);
// A stored row as the baseline of a comparison.
StoredCell ToStoredCell(const BenchCell& row);

// Records `cells` as a finished bench run described by `run` (the measuring host, tool and
// device, the commit, the label Suite::RunLabel()); returns its run id. The run stays
// unfinished (and is never taken as a baseline) when recording the cells fails; the store's
// error is returned.
absl::StatusOr<int64_t> StoreBenchRun(Store& store, const Suite& suite, const RunInfo& run,
                                      const std::vector<MeasuredCell>& cells);

// The median of a measurement's block medians (0 without blocks), microseconds.
double MedianOfBlocks(const CellMeasurement& measurement);

}  // namespace fusetune::regress

#endif  // FUSETUNE_REGRESS_BENCH_RECORDS_H_
