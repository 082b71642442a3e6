// `fusetune bench --suite` and `--from-db` as library calls: a suite's cells measured on this
// process's backend (optionally with planted slowdowns, a check of the method), and a suite
// written from a database's best configs.
//
// Thread-safety: the functions keep no state; they are as safe as the Store and Backend given.
#ifndef FUSETUNE_REGRESS_SUITE_BENCH_H_
#define FUSETUNE_REGRESS_SUITE_BENCH_H_

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/db/store.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/regress/block_source.h"
#include "fusetune/regress/compare.h"
#include "fusetune/regress/planted_slowdown.h"
#include "fusetune/regress/suite.h"

namespace fusetune::regress {

// Every --plant-slowdown spec parsed; InvalidArgument naming the first bad one.
absl::StatusOr<std::vector<PlantedSlowdown>> ParsePlantedSlowdowns(const std::vector<std::string>& specs);

// OK when every spec parses and its substring names at least one cell of `suite` ("<problem
// key> <config key>"); InvalidArgument naming the spec (and listing the cells) otherwise: a
// plant that matches nothing would make a method check measure nothing.
absl::Status CheckPlantedSlowdowns(const Suite& suite, const std::vector<std::string>& specs);

// What a run planted, for its outputs ("SUBSTRING=FRACTION; ..."); empty when nothing was.
// A run with planted slowdowns is a check of the method, not a measurement of the build: its
// bench run is never stored (so it cannot become a baseline, a calibration or a history point)
// and every output says what was planted.
std::string PlantedDescription(const std::vector<std::string>& specs);

struct SuiteBenchOptions {
  int blocks = 0;                             // blocks per cell (0: the suite's)
  const std::atomic<bool>* cancel = nullptr;  // stop early (Cancelled)
};

// A suite measured on one source.
struct SuiteBench {
  SourceInfo source;               // the measuring build's commit and device
  std::vector<MeasuredCell> cells;  // in suite order
  // Whether a cell failed verification (it has no blocks).
  bool AnyCellFailed() const;
};

// Measures every cell of `suite` on `backend` in this process (RunnerBlockSource at `commit`):
// MeasureSuite's errors (a config the device cannot run is InvalidArgument).
absl::StatusOr<SuiteBench> BenchSuite(Backend& backend, const std::string& commit, const Suite& suite,
                                      const SuiteBenchOptions& options);

// A suite written from best configs, and what it was written from.
struct SuiteFromStore {
  Suite suite;
  std::string device_class;           // of the best configs
  size_t best_configs = 0;            // how many were read
  std::vector<std::string> skipped;   // problems left out (SuiteFromBestConfigs says why)
};

// The suite `name` of the best configs recorded on `device_class` (empty: the only device class
// the store holds), each with the trials of the run that picked it; the reference cells are the
// default config of the backend they were tuned on. `db` names the store in messages. NotFound
// when there are no best configs, InvalidArgument for several device classes without one
// chosen (or SuiteFromBestConfigs' errors); the store's errors.
absl::StatusOr<SuiteFromStore> SuiteFromDatabase(Store& store, const std::string& device_class,
                                                 const std::string& name, const std::string& db);

}  // namespace fusetune::regress

#endif  // FUSETUNE_REGRESS_SUITE_BENCH_H_
