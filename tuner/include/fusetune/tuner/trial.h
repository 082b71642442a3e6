// Trial records: the data every component exchanges (tuner -> store -> service -> worker).
//
// A trial is one (problem, config) measured in one run. Its outcome is data, not an
// exception: unsupported, failed and mis-verified configs are stored like successful ones.
//
// Thread-safety: plain value types.
#ifndef FUSETUNE_TUNER_TRIAL_H_
#define FUSETUNE_TUNER_TRIAL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"

namespace fusetune {

enum class TrialOutcome {
  kOk,            // verified and timed
  kUnsupported,   // Backend::CanImplement said no (not an error: the config is pruned)
  kLaunchFailed,  // compile/launch/runtime error
  kVerifyFailed,  // ran, but the output differs from the fp64 reference beyond tolerance
  kTimedOut,      // exceeded the per-trial time limit
};
std::string_view TrialOutcomeName(TrialOutcome o);  // "ok", "unsupported", "launch_failed", ...
absl::StatusOr<TrialOutcome> ParseTrialOutcome(std::string_view name);

// One measured (problem, config).
struct Trial {
  std::string trial_id;     // TrialId(run_id, problem_key, config_key, attempt)
  int64_t run_id = 0;
  std::string problem_key;  // AttentionProblem::Key()
  std::string config_key;   // KernelConfig::Key()
  int attempt = 0;
  TrialOutcome outcome = TrialOutcome::kOk;
  std::string message;      // why, for every outcome other than kOk
  std::vector<double> samples_us;  // kept timing samples (kOk only), microseconds
  double median_us = 0, p10_us = 0, p90_us = 0;
  double max_abs_error = 0;  // vs the fp64 reference, over the checked elements
  double max_rel_error = 0;  // max |out-ref| / (|ref| + 1e-6 * ||ref||_inf) style, see runner.h
  int64_t checked_elements = 0;
  int sm_clock_mhz = 0;
  double flops = 0;          // problem.Flops(), for derived TFLOP/s
  int64_t created_unix_ms = 0;
};

// Deterministic trial id: a hex digest of (run_id, problem_key, config_key, attempt), so a
// retried upload of the same trial is recognisably the same row.
std::string TrialId(int64_t run_id, std::string_view problem_key, std::string_view config_key,
                    int attempt);

// Where a sweep came from: identifies a run.
struct RunInfo {
  int64_t run_id = 0;         // assigned by the store
  std::string commit;         // git commit of fusetune that produced the kernels
  std::string host;
  DeviceInfo device;          // device.DeviceClass() keys best configs
  std::string tool_version;
  std::string environment;    // compiler/toolkit/driver versions, free text
  std::string label;          // e.g. "sweep", "nightly", "job:<id>"
  int64_t started_unix_ms = 0;
  int64_t finished_unix_ms = 0;  // 0 while running
};

// Best config per (device class, problem), chosen by SelectBest over one or more runs.
struct BestConfig {
  std::string device_class;
  std::string problem_key;
  std::string config_key;
  double median_us = 0, p10_us = 0, p90_us = 0;
  double max_abs_error = 0;
  double max_rel_error = 0;
  // Best fused over best materialized / partial latency ratio (0 when unknown).
  double speedup_vs_materialized = 0;
  double speedup_vs_partial = 0;
  double best_materialized_us = 0;
  double best_partial_us = 0;
  int64_t run_id = 0;         // provenance
  std::string commit;
  int64_t updated_unix_ms = 0;
};

// Receives trials as they complete (the SQLite store, the worker's spool/uploader, ...).
class TrialSink {
 public:
  virtual ~TrialSink() = default;
  // Durably records one trial; idempotent by trial_id (a second write of the same id is OK
  // and changes nothing). An error means the trial was not recorded.
  virtual absl::Status RecordTrial(const Trial& trial) = 0;
};

}  // namespace fusetune

#endif  // FUSETUNE_TUNER_TRIAL_H_
