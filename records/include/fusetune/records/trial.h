// Trial records: the data every component exchanges (tuner -> store -> service -> worker).
// Below tuner/ and db/: storage and tuning both speak these types, neither owns them.
//
// A trial is one (problem, config) measured in one run. Its outcome is data, not an
// exception: unsupported, failed and mis-verified configs are stored like successful ones.
//
// Thread-safety: plain value types.
#ifndef FUSETUNE_RECORDS_TRIAL_H_
#define FUSETUNE_RECORDS_TRIAL_H_

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
  kInterrupted,   // stopped before it finished: a signal, or the sweep's time budget ran out
                  //   inside it (not a property of the config: a resumed sweep measures it again)
  kResourceExhausted,  // the host or device ran out of memory for it (inputs, workspace)
};
// "ok", "unsupported", "launch_failed", "verify_failed", "timed_out", "interrupted",
// "resource_exhausted": the names the store, the wire and the reports use.
std::string_view TrialOutcomeName(TrialOutcome o);
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
  // The block ran as one CUDA graph (TimingSamples::graphed): its samples hold no wait for the
  // host, so it does not compare with a block launched one launch at a time.
  bool graphed = false;
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
  // K/V stored as e4m3 (problem key /kve4m3): max_rel_error's metric for the same output
  // against the fp64 reference of the K/V before quantisation, what the format costs on top
  // of the kernel's own error; 0 for problems whose K/V are not quantised (and for rows
  // recorded before schema version 8).
  double unquantised_rel_error = 0;
  int64_t checked_elements = 0;
  int sm_clock_mhz = 0;      // SM clock read during the (last) timing block, MHz
  double flops = 0;          // problem.Flops(), for derived TFLOP/s
  int64_t created_unix_ms = 0;
  // Wall time of the whole measurement (runs, verification, timing; not the problem's
  // one-time input preparation), seconds; 0 when not measured (rows of schema version 1,
  // older spool records). For a final/audit trial: its share of the rounds (the rounds'
  // wall time over the candidates).
  double wall_seconds = 0;
};

// Deterministic trial id: a hex digest of (run_id, problem_key, config_key, attempt, stage),
// so a retried upload of the same trial is recognisably the same row. Screen-stage ids are
// the digest of the first four fields alone, so rows of schema version 1 keep their ids.
std::string TrialId(int64_t run_id, std::string_view problem_key, std::string_view config_key,
                    int attempt, TrialStage stage = TrialStage::kScreen);

}  // namespace fusetune

#endif  // FUSETUNE_RECORDS_TRIAL_H_
