#include "metrics.h"

#include <map>
#include <regex>
#include <sstream>

#include "fusetune/service/metric_names.h"
#include "gtest/gtest.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace fusetune {
namespace {

BestConfig Shape(int i) {
  BestConfig b;
  b.device_class = "cpu/X/y";
  b.problem_key = "prefill/b1/hq1/hkv1/q" + std::to_string(i) + "/k1/d64/causal0/fp32";
  b.median_us = i;
  return b;
}

TEST(ServiceMetrics, ShapeSeriesFollowTheStoreAndAreCapped) {
  auto metrics = ServiceMetrics::Create("", {"GetBestConfig", "LeaseJob"});
  ASSERT_TRUE(metrics.ok());
  std::vector<BestConfig> many;
  for (int i = 1; i <= static_cast<int>(kMaxShapeSeries) + 5; ++i) many.push_back(Shape(i));
  (*metrics)->SetBestConfigs(many);
  std::string text = (*metrics)->Serialize();
  EXPECT_NE(text.find("fusetune_best_series_dropped 5"), std::string::npos);
  EXPECT_NE(text.find("q1/k1/d64"), std::string::npos);
  // A shape that left the store loses its series; the cap frees up.
  (*metrics)->SetBestConfigs({Shape(7)});
  text = (*metrics)->Serialize();
  EXPECT_EQ(text.find("problem=\"prefill/b1/hq1/hkv1/q1/k1"), std::string::npos);
  EXPECT_NE(text.find("fusetune_best_run_id{device_class=\"cpu/X/y\",problem=\"prefill/b1/hq1/hkv1/q7/k1/d64/causal0/fp32\"} 0"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("fusetune_best_series_dropped 0"), std::string::npos);
}

Regression Verdict(const std::string& config, const std::string& verdict, double ratio) {
  Regression r;
  r.commit = "c0ffee";
  r.baseline_commit = "abc123";
  r.device_class = "cpu/X/y";
  r.problem_key = "prefill/b1/hq1/hkv1/q64/k64/d64/causal0/fp32";
  r.config_key = config;
  r.metric = "latency";
  r.ratio = ratio;
  r.verdict = verdict;
  return r;
}

TEST(ServiceMetrics, RegressionSeriesShowTheNewestVerdictPerCell) {
  auto metrics = ServiceMetrics::Create("", {"GetBestConfig"});
  ASSERT_TRUE(metrics.ok());
  std::string text = (*metrics)->Serialize();
  EXPECT_NE(text.find("fusetune_regressions_latest{verdict=\"regressed\"} 0"), std::string::npos) << text;
  // Newest first: cell A regressed now (it was the same before), cell B improved.
  (*metrics)->SetLatestVerdicts({Verdict("fused/a", "regressed", 1.07), Verdict("fused/b", "improved", 0.9),
                                 Verdict("fused/a", "same", 1.001)});
  text = (*metrics)->Serialize();
  EXPECT_NE(text.find("config=\"fused/a\",device_class=\"cpu/X/y\",metric=\"latency\",problem=\"prefill/b1/hq1/hkv1/q64/k64/d64/causal0/fp32\",verdict=\"regressed\"} 1.07"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("verdict=\"same\"} 1.001"), std::string::npos) << text;
  EXPECT_NE(text.find("fusetune_regressions_latest{verdict=\"regressed\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("fusetune_regressions_latest{verdict=\"improved\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("fusetune_regressions_latest{verdict=\"same\"} 0"), std::string::npos) << text;
  // A later refresh replaces the series: cell A's verdict moved to same.
  (*metrics)->SetLatestVerdicts({Verdict("fused/a", "same", 1.002)});
  text = (*metrics)->Serialize();
  EXPECT_EQ(text.find("verdict=\"regressed\"} 1.07"), std::string::npos) << text;
  EXPECT_EQ(text.find("fused/b"), std::string::npos) << text;
  EXPECT_NE(text.find("fusetune_regressions_latest{verdict=\"same\"} 1"), std::string::npos) << text;
}

TEST(ServiceMetrics, QueueGaugesExportEveryStateAndRpcCodesAreNamed) {
  auto metrics = ServiceMetrics::Create("", {"GetBestConfig", "LeaseJob"});
  ASSERT_TRUE(metrics.ok());
  (*metrics)->SetJobCounts({{"leased", 2}});
  (*metrics)->ObserveRpc("LeaseJob", grpc::StatusCode::RESOURCE_EXHAUSTED, 0.002);
  const std::string text = (*metrics)->Serialize();
  EXPECT_NE(text.find("fusetune_jobs{state=\"leased\"} 2"), std::string::npos);
  EXPECT_NE(text.find("fusetune_jobs{state=\"queued\"} 0"), std::string::npos);
  EXPECT_NE(text.find("fusetune_rpc_requests_total{code=\"RESOURCE_EXHAUSTED\",method=\"LeaseJob\"} 1"),
            std::string::npos);
}

TEST(ServiceMetrics, BestLatencyIsInSeconds) {
  auto metrics = ServiceMetrics::Create("", {});
  ASSERT_TRUE(metrics.ok());
  BestConfig b = Shape(1);
  b.median_us = 250;
  (*metrics)->SetBestConfigs({b});
  const std::string text = (*metrics)->Serialize();
  EXPECT_EQ(text.find("_us"), std::string::npos) << text;
  EXPECT_NE(text.find(std::string(kBestLatencySeconds) + "{device_class=\"cpu/X/y\",problem=\"" + b.problem_key + "\"} 0.00025"),
            std::string::npos)
      << text;
}

// A rate() over a series that first appears at 1 never counts that 1: every method x code
// counter and every method's histogram exists at 0 from the start.
TEST(ServiceMetrics, EveryRpcSeriesStartsAtZero) {
  auto metrics = ServiceMetrics::Create("", {"GetBestConfig", "LeaseJob"});
  ASSERT_TRUE(metrics.ok());
  const std::string text = (*metrics)->Serialize();
  for (const char* method : {"GetBestConfig", "LeaseJob"}) {
    for (const char* code : {"OK", "INVALID_ARGUMENT", "UNAUTHENTICATED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS"}) {
      const std::string series = std::string("fusetune_rpc_requests_total{code=\"") + code + "\",method=\"" + method + "\"} 0";
      EXPECT_NE(text.find(series), std::string::npos) << series;
    }
    EXPECT_NE(text.find(std::string("fusetune_rpc_latency_seconds_count{method=\"") + method + "\"} 0"),
              std::string::npos)
        << text;
  }
  (*metrics)->ObserveRpc("GetBestConfig", grpc::StatusCode::INVALID_ARGUMENT, 0.001);
  EXPECT_NE((*metrics)->Serialize().find(
                "fusetune_rpc_requests_total{code=\"INVALID_ARGUMENT\",method=\"GetBestConfig\"} 1"),
            std::string::npos);
}

TEST(ServiceMetrics, TakenAddressIsAClearErrorNotAnException) {
  auto first = ServiceMetrics::Create("127.0.0.1:0", {});
  ASSERT_TRUE(first.ok());
  ASSERT_GT((*first)->port(), 0);
  const std::string taken = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = ServiceMetrics::Create(taken, {});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(taken), std::string::npos);
  EXPECT_NE(second.status().message().find("Address already in use"), std::string::npos) << second.status();
  EXPECT_EQ(ServiceMetrics::Create("not-an-address", {}).status().code(), absl::StatusCode::kInvalidArgument);
}

BenchCell HistoryCell(const std::string& config, const std::string& role, double median_us, double error) {
  BenchCell c;
  c.problem_key = "prefill/b1/hq1/hkv1/q64/k64/d64/causal0/fp32";
  c.config_key = config;
  c.role = role;
  c.max_rel_error = error;
  c.tolerance = 1e-3;
  c.blocks = {{10, median_us * 2, {}, {}, false}, {10, median_us, {}, {}, false}, {10, median_us / 2, {}, {}, false}};
  return c;
}

BenchHistoryRun HistoryRun(const std::string& commit, int position, double best_us) {
  BenchHistoryRun h{"cpu/X/y", "nightly", position, {}, {}};
  h.run.commit = commit;
  h.run.finished_unix_ms = 1700000000000 + position;
  h.cells = {HistoryCell("fused/bm64/bs64/t1/fp32/st1", "best", best_us, 1e-6),
             HistoryCell("materialized/bm64/bs64/t1/fp32/st1", "materialized", 40, 2e-6),
             HistoryCell("fused/bm32/bs64/t1/tf32/st1", "reference", 12, 3e-4)};
  return h;
}

TEST(ServiceMetrics, BenchHistorySeriesArePerCommitAndFollowTheKeptRuns) {
  auto metrics = ServiceMetrics::Create("", {"GetBestConfig"});
  ASSERT_TRUE(metrics.ok());
  (*metrics)->SetBenchHistory({HistoryRun("c2", 0, 10), HistoryRun("c1", 1, 8)});
  std::string text = (*metrics)->Serialize();
  const std::string cell =
      "config=\"fused/bm64/bs64/t1/fp32/st1\",device_class=\"cpu/X/y\",problem=\"prefill/b1/hq1/hkv1/q64/k64/d64/causal0/fp32\","
      "role=\"best\",suite=\"nightly\"} ";
  // The median of the block medians, per commit, in seconds.
  EXPECT_NE(text.find(kBenchLatencySeconds + std::string("{commit=\"c2\",") + cell + "1e-05\n"), std::string::npos) << text;
  EXPECT_NE(text.find(kBenchLatencySeconds + std::string("{commit=\"c1\",") + cell + "8e-06\n"), std::string::npos) << text;
  EXPECT_NE(text.find("fusetune_bench_run_position{commit=\"c1\",device_class=\"cpu/X/y\",suite=\"nightly\"} 1"),
            std::string::npos);
  // Materialized over best of the same run; the largest error per compute precision.
  EXPECT_NE(text.find("fusetune_bench_speedup_vs_materialized{commit=\"c2\",device_class=\"cpu/X/y\","
                      "problem=\"prefill/b1/hq1/hkv1/q64/k64/d64/causal0/fp32\",suite=\"nightly\"} 4"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("fusetune_bench_max_rel_error{commit=\"c2\",device_class=\"cpu/X/y\",precision=\"fp32\","
                      "suite=\"nightly\"} 2e-06"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("precision=\"tf32\",suite=\"nightly\"} 0.0003"), std::string::npos) << text;
  // A run that is no longer kept loses its series.
  (*metrics)->SetBenchHistory({HistoryRun("c3", 0, 11), HistoryRun("c2", 1, 10)});
  text = (*metrics)->Serialize();
  EXPECT_EQ(text.find("commit=\"c1\""), std::string::npos) << text;
  EXPECT_NE(text.find("fusetune_bench_series_dropped 0"), std::string::npos);
}

TEST(ServiceMetrics, AnnotationSeriesCarryTheirTimeAsValueInUnixSeconds) {
  auto metrics = ServiceMetrics::Create("", {"GetBestConfig"});
  ASSERT_TRUE(metrics.ok());
  Regression regressed = Verdict("fused/a", "regressed", 1.07);
  regressed.created_unix_ms = 1700000123456;
  Regression older = regressed;  // the same commit checked before: the newest time stays
  older.created_unix_ms = 1600000000000;
  (*metrics)->SetRegressionAnnotations({regressed, Verdict("fused/b", "same", 1.0), older});
  // A mark's own time, or its commit's run's finish time; none without that run.
  (*metrics)->SetChangePoints({{"cpu/X/y", "nightly", "p", "fused/a", "c0ffee", "slower", 1700000000001},
                               {"cpu/X/y", "nightly", "p", "fused/a", "c2", "faster", 0},
                               {"cpu/X/y", "nightly", "p", "fused/a", "c9", "faster", 0}},
                              {HistoryRun("c2", 0, 10)});
  std::string text = (*metrics)->Serialize();
  const std::string regression = kRegressionDetectedTimestampSeconds + std::string("{baseline_commit=\"abc123\",commit=\"c0ffee\",");
  EXPECT_NE(text.find(regression + "config=\"fused/a\",device_class=\"cpu/X/y\",metric=\"latency\","
                                   "problem=\"prefill/b1/hq1/hkv1/q64/k64/d64/causal0/fp32\"} 1700000123.456\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("1600000000"), std::string::npos) << text;
  EXPECT_EQ(text.find(regression + "config=\"fused/b\""), std::string::npos);  // only regressed verdicts are marked
  const std::string change_point = kChangePointTimestampSeconds + std::string("{commit=");
  EXPECT_NE(text.find(change_point + "\"c0ffee\",config=\"fused/a\",device_class=\"cpu/X/y\","
                                     "direction=\"slower\",problem=\"p\",suite=\"nightly\"} 1700000000.001\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(change_point + "\"c2\",config=\"fused/a\",device_class=\"cpu/X/y\","
                                     "direction=\"faster\",problem=\"p\",suite=\"nightly\"} 1700000000\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("commit=\"c9\""), std::string::npos) << text;
  (*metrics)->SetChangePoints({}, {});
  (*metrics)->SetRegressionAnnotations({});
  text = (*metrics)->Serialize();
  EXPECT_EQ(text.find(kChangePointTimestampSeconds + std::string("{")), std::string::npos);
  EXPECT_EQ(text.find(kRegressionDetectedTimestampSeconds + std::string("{")), std::string::npos);
}

// Prometheus base units: a 12.5 µs cell is 1.25e-05 s, a run finished at Unix ms
// 1700000000123 is at Unix second 1700000000.123.
TEST(ServiceMetrics, BenchHistoryLatencyAndFinishTimeAreInSeconds) {
  auto metrics = ServiceMetrics::Create("", {});
  ASSERT_TRUE(metrics.ok());
  BenchHistoryRun run = HistoryRun("c1", 0, 12.5);
  run.run.finished_unix_ms = 1700000000123;
  (*metrics)->SetBenchHistory({run});
  const std::string text = (*metrics)->Serialize();
  EXPECT_NE(text.find(kBenchLatencySeconds + std::string("{commit=\"c1\",config=\"fused/bm64/bs64/t1/fp32/st1\","
                                                          "device_class=\"cpu/X/y\",problem=\"prefill/b1/hq1/hkv1/q64/k64/"
                                                          "d64/causal0/fp32\",role=\"best\",suite=\"nightly\"} 1.25e-05\n")),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(kBenchRunFinishedTimestampSeconds +
                      std::string("{commit=\"c1\",device_class=\"cpu/X/y\",suite=\"nightly\"} 1700000000.123\n")),
            std::string::npos)
      << text;
  // The speedup stays a ratio: materialized 40 µs over best 12.5 µs.
  EXPECT_NE(text.find("problem=\"prefill/b1/hq1/hkv1/q64/k64/d64/causal0/fp32\",suite=\"nightly\"} 3.2\n"), std::string::npos)
      << text;
}

// Every family is in base units: no name ends in a smaller unit (a dashboard scales seconds).
TEST(ServiceMetrics, NoSeriesNameCarriesANonBaseUnit) {
  auto metrics = ServiceMetrics::Create("", {"GetBestConfig"});
  ASSERT_TRUE(metrics.ok());
  (*metrics)->ObserveRpc("GetBestConfig", grpc::StatusCode::OK, 0.001);
  (*metrics)->AddTrials(2, 1);
  (*metrics)->SetJobCounts({{"queued", 1}});
  (*metrics)->SetWorkers(1, 1);
  (*metrics)->SetBestConfigs({Shape(1)});
  (*metrics)->SetLatestVerdicts({Verdict("fused/a", "regressed", 1.07)});
  (*metrics)->SetBenchHistory({HistoryRun("c2", 0, 10)});
  (*metrics)->SetRegressionAnnotations({Verdict("fused/a", "regressed", 1.07)});
  (*metrics)->SetChangePoints({{"cpu/X/y", "nightly", "p", "fused/a", "c2", "faster", 0}}, {HistoryRun("c2", 0, 10)});
  std::istringstream text((*metrics)->Serialize());
  const std::regex family("^# TYPE (fusetune_[a-z_]+) ");
  const std::regex non_base_unit("_(ns|us|ms|nanoseconds|microseconds|milliseconds|minutes|hours|days|unix)(_|$)");
  int families = 0;
  for (std::string line; std::getline(text, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, family)) continue;
    ++families;
    EXPECT_FALSE(std::regex_search(m[1].str(), non_base_unit)) << m[1];
  }
  EXPECT_GE(families, 20);
}

TEST(ReplacedGaugeSeries, TheCapCountsThisRefreshSoTheNewestReplaceTheOldest) {
  prometheus::Registry registry;
  auto& family = prometheus::BuildGauge().Name("t").Help("t").Register(registry);
  ReplacedGaugeSeries series(&family, 2);
  EXPECT_TRUE(series.Set({{"k", "a"}}, 1));
  EXPECT_TRUE(series.Set({{"k", "b"}}, 2));
  EXPECT_FALSE(series.Set({{"k", "c"}}, 3));
  EXPECT_TRUE(series.Set({{"k", "a"}}, 4));  // already set in this refresh
  series.RemoveUnset();
  // The next refresh: two new series, though two old ones exist until RemoveUnset.
  EXPECT_TRUE(series.Set({{"k", "d"}}, 5));
  EXPECT_TRUE(series.Set({{"k", "e"}}, 6));
  series.RemoveUnset();
  auto collected = registry.Collect();
  ASSERT_EQ(collected.size(), 1u);
  std::map<std::string, double> values;
  for (const auto& m : collected[0].metric) values[m.label.at(0).value] = m.gauge.value;
  EXPECT_EQ(values, (std::map<std::string, double>{{"d", 5}, {"e", 6}}));
}

}  // namespace
}  // namespace fusetune
