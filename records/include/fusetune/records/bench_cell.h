// Bench cell records: one measured (problem, config) cell of a bench run.
//
// Thread-safety: plain value type.
#ifndef FUSETUNE_RECORDS_BENCH_CELL_H_
#define FUSETUNE_RECORDS_BENCH_CELL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "fusetune/records/trial.h"

namespace fusetune {

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

}  // namespace fusetune

#endif  // FUSETUNE_RECORDS_BENCH_CELL_H_
