// Stored records for the library's tests: an in-memory store, a CPU device, bench runs of
// measured cells, A/A calibration rows. Header-only; for tests only.
#ifndef FUSETUNE_REGRESS_SRC_TESTING_STORE_FIXTURES_H_
#define FUSETUNE_REGRESS_SRC_TESTING_STORE_FIXTURES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fusetune/db/store.h"
#include "fusetune/regress/suite.h"
#include "gtest/gtest.h"

namespace fusetune::regress::testing {

inline constexpr char kSuiteName[] = "cpu-test";
inline constexpr char kProblemKey[] = "prefill/b1/hq2/hkv2/q32/k32/d32/causal0/fp32";
inline constexpr char kConfigA[] = "fused/bm16/bs32/t1/fp32/st1";
inline constexpr char kConfigB[] = "fused/bm64/bs64/t1/fp32/st1";
inline constexpr char kCommitA[] = "aaaaaaaa1111";  // canonical, as stored
inline constexpr char kCommitB[] = "bbbbbbbb2222";
inline constexpr char kCommitC[] = "cccccccc3333";

inline std::unique_ptr<Store> MemoryStore() {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(":memory:");
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

inline DeviceInfo CpuDevice(const std::string& name = "Test CPU") {
  DeviceInfo d;
  d.backend = "cpu";
  d.name = name;
  d.arch = "x86_64-avx2";
  d.sm_count = 2;
  d.memory_bytes = int64_t{8} << 30;
  d.driver = "none";
  return d;
}

// A verified cell of `suite` whose blocks have the given medians (microseconds).
inline BenchCell MeasuredBenchCell(const std::string& problem_key, const std::string& config_key,
                                   const std::vector<double>& medians_us, const std::string& suite = kSuiteName) {
  BenchCell c;
  c.suite = suite;
  c.problem_key = problem_key;
  c.problem_json = ProblemToJson(*AttentionProblem::FromKey(problem_key));
  c.config_key = config_key;
  c.role = "best";
  c.tolerance = 1e-4;
  for (double m : medians_us) c.blocks.push_back({50, m, {}, {}, false});
  return c;
}

// A finished bench run at `commit` on `device` holding `cells`; returns its run id.
inline int64_t RecordBenchRun(Store& store, const std::string& commit, const std::vector<BenchCell>& cells,
                              const DeviceInfo& device = CpuDevice()) {
  RunInfo info;
  info.commit = commit;
  info.host = "testhost";
  info.device = device;
  info.tool_version = "test";
  info.label = "bench:test";
  info.started_unix_ms = 1700000000000;
  absl::StatusOr<int64_t> run = store.BeginRun(info);
  EXPECT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(store.RecordBenchCells(*run, cells).ok());
  EXPECT_TRUE(store.FinishRun(*run).ok());
  return *run;
}

// A latency row of `cell` ("PROBLEM CONFIG" as two keys) at `commit` against `baseline`.
inline Regression LatencyRow(const std::string& commit, const std::string& baseline, const std::string& device_class,
                             const std::string& problem_key, const std::string& config_key, double ratio) {
  Regression r;
  r.commit = commit;
  r.baseline_commit = baseline;
  r.device_class = device_class;
  r.problem_key = problem_key;
  r.config_key = config_key;
  r.metric = "latency";
  r.ratio = ratio;
  r.p_value = 0.5;
  r.verdict = "same";
  return r;
}

}  // namespace fusetune::regress::testing

#endif  // FUSETUNE_REGRESS_SRC_TESTING_STORE_FIXTURES_H_
