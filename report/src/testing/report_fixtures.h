// Stored records for the report library's tests: a database holding what a sweep and an audit
// leave behind (runs, trials of every outcome, best configs, an audit) on a GPU known to the
// peak table and on a CPU that is not. Header-only; for tests only.
#ifndef FUSETUNE_REPORT_SRC_TESTING_REPORT_FIXTURES_H_
#define FUSETUNE_REPORT_SRC_TESTING_REPORT_FIXTURES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "fusetune/db/store.h"
#include "fusetune/regress/suite.h"
#include "fusetune/kernels/problem.h"
#include "gtest/gtest.h"

namespace fusetune::report::testing {

inline constexpr char kPrefillKey[] = "prefill/b1/hq12/hkv12/q1024/k1024/d64/causal0/bf16";
inline constexpr char kDecodeKey[] = "decode/b16/hq32/hkv8/q1/k8192/d128/causal1/bf16";
// A problem key with markup in it: the pages must escape it.
inline constexpr char kHostileHost[] = "host<script>alert('x')</script>&amp;";
inline constexpr char kFusedPick[] = "fused/bm64/bs64/t128/bf16/st2";

inline DeviceInfo H200() {
  DeviceInfo d;
  d.backend = "cuda";
  d.name = "NVIDIA H200";
  d.arch = "sm90";
  d.sm_count = 132;
  d.driver = "driver 580.95, CUDA 13.0";
  d.max_clock_mhz = 1980;
  return d;
}

inline DeviceInfo TestCpu() {
  DeviceInfo d;
  d.backend = "cpu";
  d.name = "Test CPU";
  d.arch = "x86_64-avx2";
  d.sm_count = 2;
  d.driver = "none";
  return d;
}

inline Trial MakeTrial(int64_t run, const std::string& problem, const std::string& config, TrialOutcome outcome,
                       double median_us, TrialStage stage = TrialStage::kScreen, const std::string& message = "") {
  Trial t;
  t.run_id = run;
  t.problem_key = problem;
  t.config_key = config;
  t.stage = stage;
  t.attempt = 0;
  t.trial_id = TrialId(run, problem, config, 0, stage);
  t.outcome = outcome;
  t.message = outcome == TrialOutcome::kOk ? "" : (message.empty() ? "it failed" : message);
  if (outcome == TrialOutcome::kOk) {
    t.median_us = t.p10_us = t.p90_us = median_us;
    t.samples_us = {median_us};
    t.sm_clock_mhz = 1755;
  }
  t.created_unix_ms = 1700000000000;
  return t;
}

inline int64_t BeginFinishedRun(Store& store, const DeviceInfo& device, const std::string& commit,
                                const std::string& host = "gpu-host-1") {
  RunInfo info;
  info.commit = commit;
  info.host = host;
  info.device = device;
  info.tool_version = "0.9.0";
  info.environment = "gcc 12.2, CUDA 13.0";
  info.label = "sweep";
  info.started_unix_ms = 1700000000000;
  absl::StatusOr<int64_t> run = store.BeginRun(info);
  EXPECT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(store.FinishRun(*run).ok());
  return *run;
}

inline BestConfig Pick(const DeviceInfo& device, int64_t run, const std::string& problem, const std::string& config,
                       double median_us, const std::string& commit) {
  BestConfig b;
  b.device_class = device.DeviceClass();
  b.problem_key = problem;
  b.config_key = config;
  b.median_us = median_us;
  b.p10_us = 0.98 * median_us;
  b.p90_us = 1.03 * median_us;
  b.max_rel_error = 2.5e-3;
  b.max_abs_error = 1e-3;
  b.best_partial_us = 1.6 * median_us;
  b.best_materialized_us = 2.9 * median_us;
  b.speedup_vs_partial = 1.6;
  b.speedup_vs_materialized = 2.9;
  b.run_id = run;
  b.commit = commit;
  b.updated_unix_ms = 1700000100000;
  return b;
}

// A database with: on the H200 a prefill problem (a 3 x 3 fused space per thread count, one
// verify failure, one launch failure, unsupported configs; partial and materialized configs;
// audited) and a decode problem (not audited); on the CPU one prefill problem from a run whose
// host name holds markup.
inline void FillTuningStore(Store& store) {
  const std::string commit = "0123456789ab";
  const int64_t run = BeginFinishedRun(store, H200(), commit);
  std::vector<Trial> trials;
  for (int threads : {128, 256}) {
    for (int bm : {64, 128, 192}) {
      for (int bs : {32, 64, 128}) {
        const std::string key = fmt::format("fused/bm{}/bs{}/t{}/bf16/st2", bm, bs, threads);
        if (bm == 192 && bs == 128) {
          trials.push_back(MakeTrial(run, kPrefillKey, key, TrialOutcome::kUnsupported, 0, TrialStage::kScreen,
                                     "shared memory: needs 240 KiB, the device has 227 KiB"));
        } else if (bm == 128 && bs == 128 && threads == 256) {
          trials.push_back(MakeTrial(run, kPrefillKey, key, TrialOutcome::kVerifyFailed, 0, TrialStage::kScreen,
                                     "max rel error 3.1e-1 > tolerance 2e-2"));
        } else if (bm == 64 && bs == 32 && threads == 256) {
          trials.push_back(MakeTrial(run, kPrefillKey, key, TrialOutcome::kLaunchFailed, 0, TrialStage::kScreen,
                                     "too many resources requested for launch"));
        } else {
          trials.push_back(MakeTrial(run, kPrefillKey, key, TrialOutcome::kOk, 40.0 + bm / 8.0 + bs / 16.0 + threads / 64.0));
        }
      }
    }
  }
  trials.push_back(MakeTrial(run, kPrefillKey, "partial/bm64/bs64/t128/bf16/st1", TrialOutcome::kOk, 72.0));
  trials.push_back(MakeTrial(run, kPrefillKey, "materialized/bm64/bs64/t256/bf16/st1", TrialOutcome::kOk, 130.0));
  trials.push_back(MakeTrial(run, kDecodeKey, "fused/bm16/bs64/t128/bf16/st2/sk8", TrialOutcome::kOk, 160.0));
  trials.push_back(MakeTrial(run, kDecodeKey, "fused/bm16/bs128/t128/bf16/st2/sk8", TrialOutcome::kOk, 150.0));
  trials.push_back(MakeTrial(run, kDecodeKey, "fused/bm16/bs128/t128/bf16/st2/sk4", TrialOutcome::kOk, 175.0));
  ASSERT_TRUE(store.RecordTrials(trials).ok());
  ASSERT_TRUE(store.UpsertBestConfig(Pick(H200(), run, kPrefillKey, kFusedPick, 46.0, commit)).ok());
  ASSERT_TRUE(
      store.UpsertBestConfig(Pick(H200(), run, kDecodeKey, "fused/bm16/bs128/t128/bf16/st2/sk8", 150.0, commit)).ok());
  AuditSummary audit;
  audit.device_class = H200().DeviceClass();
  audit.problem_key = kPrefillKey;
  audit.recorded_config_key = kFusedPick;
  audit.best_config_key = "fused/bm64/bs32/t128/bf16/st2";
  audit.recorded_us = 46.0;
  audit.best_us = 45.5;
  audit.regret = 0.011;
  audit.regret_low = 0.004;
  audit.regret_high = 0.019;
  audit.rounds = 15;
  audit.configs_measured = 14;
  audit.commit = commit;
  audit.created_unix_ms = 1700000200000;
  ASSERT_TRUE(store.RecordAudit(audit).ok());

  const int64_t cpu_run = BeginFinishedRun(store, TestCpu(), "fedcba987654", kHostileHost);
  const std::string cpu_problem = "prefill/b1/hq2/hkv2/q128/k128/d32/causal0/fp32";
  ASSERT_TRUE(store
                  .RecordTrials({MakeTrial(cpu_run, cpu_problem, "fused/bm16/bs32/t1/fp32/st1", TrialOutcome::kOk, 90),
                                 MakeTrial(cpu_run, cpu_problem, "fused/bm32/bs32/t1/fp32/st1", TrialOutcome::kOk, 80)})
                  .ok());
  ASSERT_TRUE(store.UpsertBestConfig(Pick(TestCpu(), cpu_run, cpu_problem, "fused/bm32/bs32/t1/fp32/st1", 80,
                                          "fedcba987654"))
                  .ok());
}

inline constexpr char kSuite[] = "nightly";
inline constexpr char kStepCell[] = "prefill/b1/hq2/hkv2/q64/k64/d32/causal0/fp32";
inline constexpr char kStepConfig[] = "fused/bm16/bs16/t1/fp32/st1";
inline constexpr char kFlatConfig[] = "materialized/bm16/bs16/t1/fp32/st1";

// The commit of night `i`, canonical.
inline std::string NightCommit(int i) { return fmt::format("c0debeef{:04x}", i); }

// `nights` finished bench runs of kSuite on the H200, one commit each, each holding two cells
// of kStepCell's problem: kStepConfig, 20 % slower from night `step_at` on, and kFlatConfig,
// flat. Blocks carry the SM clock (1755 MHz, 1740 after).
inline void FillHistoryStore(Store& store, int nights = 12, int step_at = 6) {
  for (int i = 0; i < nights; ++i) {
    RunInfo info;
    info.commit = NightCommit(i);
    info.host = "gpu-host-1";
    info.device = H200();
    info.tool_version = "0.9.0";
    info.label = "bench:nightly";
    info.started_unix_ms = 1700000000000 + int64_t{86400000} * i;
    info.finished_unix_ms = info.started_unix_ms + 3600000;  // stored as given: the dates are known
    absl::StatusOr<int64_t> run = store.BeginRun(info);
    ASSERT_TRUE(run.ok()) << run.status();
    std::vector<BenchCell> cells;
    for (const char* config : {kStepConfig, kFlatConfig}) {
      BenchCell c;
      c.suite = kSuite;
      c.problem_key = kStepCell;
      c.problem_json = regress::ProblemToJson(*AttentionProblem::FromKey(kStepCell));
      c.config_key = config;
      c.role = "best";
      c.tolerance = 1e-4;
      const double level = (config == std::string(kStepConfig) && i >= step_at) ? 120 : 100;
      for (int b = 0; b < 6; ++b) {
        SampleBlock block{50, level * (1 + 0.002 * ((i * 7 + b) % 5)), {true, 1755, 300000, 0}, {true, 1740, 300000, 0}, false};
        c.blocks.push_back(block);
      }
      cells.push_back(c);
    }
    ASSERT_TRUE(store.RecordBenchCells(*run, cells).ok());
  }
}

}  // namespace fusetune::report::testing

#endif  // FUSETUNE_REPORT_SRC_TESTING_REPORT_FIXTURES_H_
