// Audit: how much slower is a problem's recorded best config than the true best of its space?
//
// RunAudit re-measures the recorded config against every config of the problem's space on
// one backend, in one process, on the same inputs:
//   1. every config of the space is verified and timed once (a screen trial, stage kAudit
//      screen blocks are not kept apart: they are the trials' first block);
//   2. the recorded config and the configs whose screen median is within
//      `contender_fraction` of the fastest (at least `min_contenders`, at most
//      `max_contenders`) are measured in `rounds` interleaved rounds (a fresh random order
//      each round, one timing block per config per round, the L2 state the timing options
//      say);
//   3. for each contender c the per-round ratios recorded_i / c_i give the median ratio;
//      the closest contender is the one with the largest median ratio. When that is above
//      1 it is the best config and regret = that median ratio - 1; otherwise the recorded
//      config is the best and regret = 0. Either way the 90 % confidence interval is that
//      of the closest contender's ratio (order statistics of the per-round ratios, the
//      distribution-free interval for a median), widened to contain the regret: see
//      AuditSummary.
// A recorded config the backend cannot run (or that fails verification) is an error, not
// an audit: FailedPrecondition with the trial's message.
//
// RunAudit records nothing (unlike RunSweep it takes no RecordSink): an audit is kept whole
// or not at all, and its summary carries the caller's provenance and refers to its trials.
// So the caller records the returned trials and summary together once the audit is done
// (`fusetune audit`: one store transaction, then Store::RecordAudit; the worker: its spool,
// then ReportAudit once those trials are on the server). An audit cut short leaves nothing.
//
// Thread-safety: drives one Backend; do not share it meanwhile.
#ifndef FUSETUNE_TUNER_AUDIT_H_
#define FUSETUNE_TUNER_AUDIT_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"
#include "fusetune/tuner/config_space.h"
#include "fusetune/tuner/runner.h"
#include "fusetune/records/trial.h"
#include "fusetune/records/run.h"

namespace fusetune {

struct AuditOptions {
  ConfigSpaceOptions space;        // the space to audit against (default: the backend's)
  RunnerOptions runner;            // inputs, verification, and the timing of each block
  int rounds = 15;                 // interleaved rounds of the final comparison (>= 3)
  double contender_fraction = 0.05;
  int min_contenders = 4;          // besides the recorded config
  int max_contenders = 12;
  uint64_t seed = 1;               // round order
};

struct AuditResult {
  AuditSummary summary;            // audit_id 0 (the store assigns it)
  std::vector<Trial> trials;       // every measurement, stage kAudit: screen trials
                                   // (attempt 0) and round trials (attempt 1)
  double seconds = 0;              // wall time of the audit
};

// Runs the audit described above for `problem`, recorded config `recorded`, trials under
// `run_id`. InvalidArgument for an invalid problem or options; FailedPrecondition when the
// recorded config does not verify on this backend; Cancelled when `*cancel` became true
// (checked between measurements).
absl::StatusOr<AuditResult> RunAudit(Backend& backend, const AttentionProblem& problem,
                                     const KernelConfig& recorded, const AuditOptions& options,
                                     int64_t run_id, const std::atomic<bool>* cancel = nullptr);

}  // namespace fusetune

#endif  // FUSETUNE_TUNER_AUDIT_H_
