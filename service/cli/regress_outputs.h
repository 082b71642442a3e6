// What `fusetune regress` leaves behind: the candidate's bench run and the verdict rows in the
// database, the JUnit and markdown reports, the markdown on stdout, and (service builds, with
// --server) the verdict rows on a fusetune server.
#ifndef FUSETUNE_SERVICE_CLI_REGRESS_OUTPUTS_H_
#define FUSETUNE_SERVICE_CLI_REGRESS_OUTPUTS_H_

#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "fusetune/bench/compare.h"
#include "fusetune/bench/suite.h"
#include "builds.h"
#include "fusetune/db/store.h"

#ifdef FUSETUNE_WITH_SERVICE
#include "server_connection.h"
#endif

namespace fusetune::cli {

struct RegressFlags {
  std::string suite;
  std::string baseline;
  std::string commit;
  std::string db = "fusetune.db";
  std::string backend = "cpu";
  int device = 0;
  std::string baseline_binary;
  std::string candidate_binary;
  std::string builds_dir;
  std::string rebuild_command;
  std::string junit;
  std::string markdown;
  int blocks = 0;
  double stored_floor = 0.03;
  bool no_picks = false;
  bool fail_on_unknown = false;  // an unknown cell fails the run (not a calibration's)
  std::vector<std::string> plant_slowdowns;  // the candidate side's
  int timing_cpu = kAutoTimingCpu;
#ifdef FUSETUNE_WITH_SERVICE
  ServerConnectionFlags server;  // server.server empty: upload nothing
#endif
};

// --server, --token-file, --tls-ca, --timeout in service builds; nothing otherwise.
void AddRegressServerOptions(CLI::App* command, RegressFlags* flags);

// OK when the output file `path` (given with `flag`) can be written at the end of a command:
// it is not a directory, and the nearest existing directory above it lets this process create
// a file (probed with a temporary file, removed at once; missing directories below it are
// created when the file is written). Empty `path`: nothing asked, OK. InvalidArgument naming the
// flag otherwise. Called before anything is measured or stored, so bad output paths cost nothing.
absl::Status CheckOutputFile(const std::string& flag, const std::string& path);

// Whether `comparison` is an A/A calibration: the same commit on both sides and nothing planted.
// Its verdicts measure two processes of one build: they are reported and stored (later runs'
// floors read its latency rows), and its timing verdicts do not gate.
bool IsCalibration(const RegressFlags& flags, const bench::Comparison& comparison);

// A calibration calls no cell regressed or improved: a timing difference beyond a cell's floor
// between two processes of one build is the host's between-process noise, which is what the
// calibration measures, so such a cell is reported unknown with that reason (its ratio stays,
// for later floors). Accuracy verdicts are left as they are. Returns how many cells it changed.
int ReportCalibrationDifferencesAsUnknown(bench::Comparison& comparison);

// The rows of `comparison` for the `regressions` table: per cell a "latency" row (a pick cell:
// "latency_vs_previous_pick"; with planted slowdowns "planted_latency", so that a method check
// is never read as a calibration) with the Hodges–Lehmann ratio and the adjusted p-value of the
// direction it leans, and a "max_rel_error" row (ratio = error growth) where accuracy was checked.
std::vector<Regression> RegressionRows(const bench::Comparison& comparison, bool planted);

// The metric of an A/A calibration row: the latency rows of a comparison whose baseline and
// candidate commits are equal (two processes of one build).
inline constexpr char kLatencyMetric[] = "latency";

// Stores the candidate's measurement as a bench run and the verdict rows (creating the database
// when `store` is null), writes the reports, prints the markdown, uploads with --server. A
// calibration's reports say so, with what it measured (a JUnit property "calibration"). The
// first failure is returned; what was written before it stays.
absl::Status WriteRegressOutputs(const RegressFlags& flags, const bench::Suite& suite,
                                 const bench::Comparison& comparison, const std::vector<std::string>& notes,
                                 std::unique_ptr<Store>& store);

}  // namespace fusetune::cli

#endif  // FUSETUNE_SERVICE_CLI_REGRESS_OUTPUTS_H_
