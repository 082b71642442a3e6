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

// Which measurement of a sweep a trial is.
enum class TrialStage {
  kScreen,   // the search: verified, then timed in one block (the first look at a config)
  kHalving,  // a successive-halving rung: the survivors in interleaved rounds (attempt
             //   = rung * kHalvingAttemptStride + retry)
  kFinal,   // the interleaved final rounds among the screen's leaders: one block per round
  kAudit,   // an audit's interleaved rounds over a problem's whole space: one block per round
};
std::string_view TrialStageName(TrialStage s);  // "screen", "halving", "final", "audit"
absl::StatusOr<TrialStage> ParseTrialStage(std::string_view name);

// Interleaved rounds are paired by index, so a set of round trials is only usable whole.
// A set interrupted while being recorded is measured again under the next attempt number;
// halving rungs keep their rung in the attempt's higher digits.
inline constexpr int kHalvingAttemptStride = 16;

// One Backend::Time call: `samples` timed launches, summarised by their median, with the
// device state read around it. In interleaved rounds a trial has one block per round, in
// round order, so blocks of two trials of the same rounds pair up by index.
struct SampleBlock {
  int samples = 0;
  double median_us = 0;
  DeviceState before;
  DeviceState after;
  bool unsteady = false;  // DeviceStateMoved(before, after): clock or throttle state moved
};

// One measured (problem, config).
struct Trial {
  std::string trial_id;     // TrialId(run_id, problem_key, config_key, attempt, stage)
  int64_t run_id = 0;
  std::string problem_key;  // AttentionProblem::Key()
  std::string config_key;   // KernelConfig::Key()
  int attempt = 0;
  TrialStage stage = TrialStage::kScreen;
  TrialOutcome outcome = TrialOutcome::kOk;
  std::string message;      // why, for every outcome other than kOk
  // kOk only, microseconds. Screen: the kept timing samples of its one block. Final and
  // audit: one value per round, that round's block median (so samples_us[i] of two trials
  // of the same rounds were measured side by side).
  std::vector<double> samples_us;
  std::vector<SampleBlock> blocks;  // kOk only: the timing blocks, in order
  double median_us = 0, p10_us = 0, p90_us = 0;
  double max_abs_error = 0;  // vs the fp64 reference, over the checked elements
  double max_rel_error = 0;  // max |out-ref| / (|ref| + 1e-6 * ||ref||_inf) style, see runner.h
  int64_t checked_elements = 0;
  int sm_clock_mhz = 0;      // SM clock read during the (last) timing block, MHz
  double flops = 0;          // problem.Flops(), for derived TFLOP/s
  int64_t created_unix_ms = 0;
  // Wall time of the whole measurement (runs, verification, timing; not the problem's
  // one-time input preparation), seconds;
  // 0 for trials recorded before it was kept. For a final/audit trial: its share of the
  // rounds (the rounds' wall time over the candidates).
  double wall_seconds = 0;
};

// Deterministic trial id: a hex digest of (run_id, problem_key, config_key, attempt, stage),
// so a retried upload of the same trial is recognisably the same row. Screen-stage ids are
// the digest of the first four fields alone, as they were before stages existed.
std::string TrialId(int64_t run_id, std::string_view problem_key, std::string_view config_key,
                    int attempt, TrialStage stage = TrialStage::kScreen);

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

// The outcome of an audit: a problem's recorded best config re-measured, interleaved,
// against every config of its space. regret = recorded / best - 1 from per-round ratios.
struct AuditSummary {
  int64_t audit_id = 0;            // assigned by the store
  int64_t run_id = 0;              // the audit's run (its trials, stage kAudit)
  std::string device_class;
  std::string problem_key;
  std::string recorded_config_key; // the best config the store held when the audit started
  std::string best_config_key;     // the fastest config the audit measured
  double recorded_us = 0;          // median over the final rounds, microseconds
  double best_us = 0;
  double regret = 0;               // median over rounds of recorded/best, minus 1 (>= 0)
  // 90 % confidence interval (order statistics) of recorded / closest contender - 1, the
  // closest being the contender with the largest such median: around the regret when a
  // faster config was found; when the recorded config is the best (regret 0), regret_low
  // < 0 says by how much it beats the runner-up. Always regret_low <= regret <= regret_high.
  double regret_low = 0;
  double regret_high = 0;
  int rounds = 0;                  // interleaved rounds of the final comparison
  int configs_measured = 0;        // configs of the space that verified and were timed
  int configs_failed = 0;          // configs that failed (unsupported ones not counted)
  std::string commit;
  int64_t created_unix_ms = 0;
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
