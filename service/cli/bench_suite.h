// `fusetune bench --suite` (measure a suite's cells, optionally store them as a bench run),
// `fusetune bench --from-db` (write a suite from a database's best configs) and the backend
// both `bench --suite` and `bench-serve` measure on.
#ifndef FUSETUNE_SERVICE_CLI_BENCH_SUITE_H_
#define FUSETUNE_SERVICE_CLI_BENCH_SUITE_H_

#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "fusetune/records/run.h"
#include "fusetune/regress/block_source.h"
#include "fusetune/regress/suite.h"
#include "fusetune/kernels/backend.h"

namespace fusetune::cli {

struct SuiteBenchFlags {
  std::string suite;            // --suite FILE
  std::string db;               // --db PATH: store a bench run there (empty: store nothing)
  int blocks = 0;               // --blocks (0: the suite's)
  std::vector<std::string> plant_slowdowns;  // --plant-slowdown SUBSTRING=FRACTION
  bool json = false;
};

struct SuiteFromDbFlags {
  std::string db;               // --from-db PATH
  std::string out;              // --suite-out FILE
  std::string device_class;     // --device-class (empty: the only one in the database)
  std::string name;             // --name (default: the file's stem)
};

// The local backend with the planted slowdowns (none: the backend itself). nullptr with the
// error printed and *exit_code set on failure.
std::unique_ptr<Backend> CreateMeasuredBackend(const std::string& command, const std::string& backend, int device,
                                               const std::vector<std::string>& plant_slowdowns, int* exit_code);
// The description of a bench run of `suite` measured by `source`: this host and tool
// (LocalRunInfo), the source's device and commit, its environment after this build's.
RunInfo BenchRunInfo(const regress::Suite& suite, const regress::SourceInfo& source);

// Registers --plant-slowdown on `command`.
void AddPlantSlowdownOption(CLI::App* command, std::vector<std::string>* specs);

// Exit: 0 every cell verified and was measured; 1 a cell failed verification (recorded);
// 2 an error (bad suite, a config the device cannot run, the database): nothing stored.
int RunSuiteBench(const SuiteBenchFlags& flags, const std::string& backend, int device);
// Exit: 0 written; 2 an error (no database, no best configs, ...): no file written.
int WriteSuiteFromDatabase(const SuiteFromDbFlags& flags);

}  // namespace fusetune::cli

#endif  // FUSETUNE_SERVICE_CLI_BENCH_SUITE_H_
