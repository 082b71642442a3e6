// Run, best-config and audit records: what a sweep or audit leaves behind besides its trials.
//
// Thread-safety: plain value types.
#ifndef FUSETUNE_RECORDS_RUN_H_
#define FUSETUNE_RECORDS_RUN_H_

#include <cstdint>
#include <string>

#include "fusetune/kernels/backend.h"

namespace fusetune {

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

}  // namespace fusetune

#endif  // FUSETUNE_RECORDS_RUN_H_
