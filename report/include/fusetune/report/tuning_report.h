// The tuning report (`fusetune report --html`): per device class and problem, the config space
// as heatmaps (block_m x block_s, one panel per variant, precision and threads; colour = time,
// failed and unsupported configs marked by their outcome), the variants' best times side by
// side, the pick's throughput as a share of the device's peak (KnownPeak), the newest audit's
// regret with its interval; a sortable index of the problems; the environment of the runs the
// picks came from.
//
// ReadTuningReport gathers what the page shows from a Store (only reads); TuningReportHtml
// writes it. The page depends only on the data: the same store gives the same bytes.
//
// Thread-safety: the functions keep no state; ReadTuningReport is as safe as its Store.
#ifndef FUSETUNE_REPORT_TUNING_REPORT_H_
#define FUSETUNE_REPORT_TUNING_REPORT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/db/store.h"
#include "fusetune/kernels/config.h"
#include "fusetune/records/run.h"
#include "fusetune/records/trial.h"

namespace fusetune::report {

// What the tuner measured of one config of a problem.
struct ConfigResult {
  std::string config_key;
  KernelConfig config;
  TrialOutcome outcome = TrialOutcome::kOk;  // kOk when any trial of it verified and was timed
  double median_us = 0;  // kOk: its screen median (the one measurement every config has); else 0
  std::string message;   // why, for other outcomes
};

// One tuned problem: its pick, every config measured in the pick's run, the newest audit of
// the pick.
struct ProblemResult {
  BestConfig best;
  std::vector<ConfigResult> configs;  // ordered by ConfigOrderLess
  std::optional<AuditSummary> audit;  // of best.config_key; nullopt when never audited
  int best_sm_clock_mhz = 0;          // read during the pick's newest timing (0: unknown)
  // K/V stored as e4m3: the pick's error against the reference of the unquantised K/V
  // (PickUnquantisedRelError); nullopt for other problems.
  std::optional<double> unquantised_rel_error;
};

struct DeviceResults {
  std::string device_class;
  std::vector<ProblemResult> problems;  // problem keys in NaturalLess order
  std::vector<RunInfo> runs;            // the runs the picks came from, by run id
};

struct TuningReport {
  std::string source;  // what the page says it was made from, e.g. the database path
  std::vector<DeviceResults> devices;  // by device class
};

// Whether a problem key names K/V stored as e4m3 (its /kve4m3 part).
bool IsE4m3ProblemKey(const std::string& problem_key);

// For a pick of a problem whose K/V are stored as e4m3: the largest Trial::unquantised_rel_error
// of the pick's verified trials among `trials` (those of its problem), what the format costs
// beside the kernel's own max_rel_error; nullopt for other problems or when no verified trial
// of the pick is among them.
std::optional<double> PickUnquantisedRelError(const BestConfig& best, const std::vector<Trial>& trials);
// The same, reading the pick's run's trials of its problem from the store.
absl::StatusOr<std::optional<double>> PickUnquantisedRelError(Store& store, const BestConfig& best);

// Reads every best config of `device_class` (empty: all) with its run's trials, its newest
// audit and its run. The store's errors; an empty report when nothing was tuned.
absl::StatusOr<TuningReport> ReadTuningReport(Store& store, const std::string& device_class,
                                              const std::string& source);

// The self-contained page (html.h). Never fails: missing pieces (no trials, no audit, an
// unknown device's peak, a problem key that does not parse) are said on the page.
std::string TuningReportHtml(const TuningReport& report);

}  // namespace fusetune::report

#endif  // FUSETUNE_REPORT_TUNING_REPORT_H_
