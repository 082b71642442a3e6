// The Grafana dashboard parses, every fusetune_* metric its queries and annotations use is
// one the server's exporter actually produces (names taken from ServiceMetrics' own
// exposition), its annotations and date columns take their time from a timestamp series in
// Unix seconds, converted to the milliseconds Grafana reads, and its duration panels are in
// seconds.
// tests/prometheus/dashboard_queries_test runs every query through a real Prometheus server.
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "fusetune/service/metric_names.h"
#include "gtest/gtest.h"
#include "metrics.h"
#include "fusetune/worker/worker_metrics.h"
#include "nlohmann/json.hpp"

namespace fusetune {
namespace {

std::set<std::string> ExportedNames() {
  auto metrics = ServiceMetrics::Create("", {"GetBestConfig"});
  EXPECT_TRUE(metrics.ok());
  (*metrics)->ObserveRpc("GetBestConfig", grpc::StatusCode::OK, 0.001);
  (*metrics)->AddTrials(2, 1);
  (*metrics)->SetJobCounts({{"queued", 1}});
  (*metrics)->SetWorkers(1, 1);
  BestConfig b;
  b.device_class = "cpu/x/y";
  b.problem_key = "prefill/b1/hq1/hkv1/q1/k1/d64/causal0/fp32";
  (*metrics)->SetBestConfigs({b});
  Regression r;
  r.device_class = b.device_class;
  r.problem_key = b.problem_key;
  r.config_key = "fused/bm64/bs64/t2/fp32/st1";
  r.metric = "latency";
  r.ratio = 1.02;
  r.verdict = "same";
  (*metrics)->SetLatestVerdicts({r});
  r.verdict = "regressed";
  r.commit = "c2";
  r.baseline_commit = "c1";
  (*metrics)->SetRegressionAnnotations({r});
  BenchHistoryRun run{"cpu/x/y", "nightly", 0, {}, {}};
  run.run.commit = "c2";
  for (const char* role : {"best", "materialized"}) {
    BenchCell cell;
    cell.problem_key = b.problem_key;
    cell.config_key = r.config_key;
    cell.role = role;
    cell.tolerance = 1e-4;
    cell.blocks = {{10, 5.0, {}, {}, false}};
    run.cells.push_back(cell);
  }
  (*metrics)->SetBenchHistory({run});
  (*metrics)->SetChangePoints({{"cpu/x/y", "nightly", b.problem_key, r.config_key, "c2", "slower", 0}}, {run});
  std::set<std::string> names;
  // The workers' series are on the dashboard too (a Prometheus scrapes both kinds of process).
  std::istringstream text((*metrics)->Serialize() + RenderWorkerMetrics(WorkerStats{}, {"host-d0"}, "cuda"));
  std::string line;
  const std::regex sample("^(fusetune_[a-z_]+)[{ ]");
  while (std::getline(text, line)) {
    std::smatch m;
    if (std::regex_search(line, m, sample)) names.insert(m[1]);
  }
  return names;
}

void CollectExprs(const nlohmann::json& node, std::vector<std::string>* out) {
  if (node.is_object()) {
    for (auto it = node.begin(); it != node.end(); ++it) {
      if ((it.key() == "expr" || it.key() == "definition") && it.value().is_string()) {
        out->push_back(it.value().get<std::string>());
      } else {
        CollectExprs(it.value(), out);
      }
    }
  } else if (node.is_array()) {
    for (const auto& child : node) CollectExprs(child, out);
  }
}

TEST(Dashboards, GrafanaDashboardUsesOnlyExportedMetrics) {
  std::ifstream in(FUSETUNE_DASHBOARD_JSON);
  ASSERT_TRUE(in) << FUSETUNE_DASHBOARD_JSON;
  auto dashboard = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(dashboard.is_discarded()) << "dashboard JSON does not parse";
  ASSERT_TRUE(dashboard["panels"].is_array());

  const std::set<std::string> exported = ExportedNames();
  // Histograms export _bucket/_sum/_count; a sanity check that the exposition was read.
  ASSERT_TRUE(exported.count("fusetune_rpc_latency_seconds_bucket")) << exported.size();
  ASSERT_TRUE(exported.count(kBestLatencySeconds));

  std::vector<std::string> exprs;
  CollectExprs(dashboard, &exprs);
  ASSERT_GE(exprs.size(), 10u);
  const std::regex metric("fusetune_[a-z_]+");
  std::set<std::string> used;
  for (const std::string& e : exprs) {
    for (std::sregex_iterator it(e.begin(), e.end(), metric), end; it != end; ++it) {
      used.insert(it->str());
      EXPECT_TRUE(exported.count(it->str())) << "dashboard uses " << it->str() << ", which the server does not export";
    }
  }
  // Each series family the dashboard is meant to show is on it.
  for (const char* required : {kBestLatencySeconds, "fusetune_best_speedup_vs_materialized",
                               "fusetune_best_max_rel_error", "fusetune_jobs", "fusetune_workers_alive",
                               "fusetune_rpc_requests_total", "fusetune_rpc_latency_seconds_bucket",
                               "fusetune_worker_jobs_total", "fusetune_worker_trials_total",
                               "fusetune_worker_device_failures_total", "fusetune_regression_ratio",
                               "fusetune_regressions_latest", kBenchLatencySeconds,
                               "fusetune_bench_run_position", "fusetune_bench_speedup_vs_materialized",
                               "fusetune_bench_max_rel_error", "fusetune_bench_series_dropped",
                               kRegressionDetectedTimestampSeconds, kChangePointTimestampSeconds}) {
    EXPECT_TRUE(used.count(required)) << required << " is not on the dashboard";
  }
}

TEST(Dashboards, AnnotationsMarkChangePointsAndRegressionsAtTheirSeriesValue) {
  std::ifstream in(FUSETUNE_DASHBOARD_JSON);
  auto dashboard = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(dashboard.is_discarded());
  const nlohmann::json& list = dashboard["annotations"]["list"];
  ASSERT_TRUE(list.is_array());
  std::set<std::string> families;
  // The series holds Unix seconds; Grafana reads the value as Unix milliseconds. Every replica
  // exports the same events (they are read from the database): one annotation per event.
  const std::regex timestamp_family(
      "^max without \\(instance, replica\\) \\((fusetune_[a-z_]+_timestamp_seconds)\\{[^}]*\\}\\) \\* 1000$");
  for (const nlohmann::json& a : list) {
    ASSERT_TRUE(a.contains("expr") && a["expr"].is_string()) << a.dump();
    const std::string expr = a["expr"].get<std::string>();
    // Grafana places each event at the sample's value, not at the scrape time.
    EXPECT_EQ(a.value("useValueForTime", false), true) << expr;
    EXPECT_NE(a.value("titleFormat", "").find("{{commit}}"), std::string::npos) << expr;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(expr, m, timestamp_family)) << expr;
    families.insert(m[1]);
  }
  EXPECT_EQ(families, (std::set<std::string>{kChangePointTimestampSeconds, kRegressionDetectedTimestampSeconds}));
}

// Grafana scales the unit "s" (µs, ms, s) and reads a date unit (dateTimeAsIso, ...) as Unix
// milliseconds: a panel of a duration in seconds has the unit "s"; one of a timestamp has a
// date unit and each of its timestamp queries multiplies the Unix seconds by 1000.
TEST(Dashboards, PanelUnitsMatchTheSeriesUnits) {
  std::ifstream in(FUSETUNE_DASHBOARD_JSON);
  auto dashboard = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(dashboard.is_discarded());
  const std::regex timestamp("fusetune_[a-z_]+_timestamp_seconds(?![a-z_])");
  const std::regex duration("fusetune_[a-z_]+_seconds(_bucket|_sum|_count)?(?![a-z_])");
  int timestamp_panels = 0, duration_panels = 0;
  for (const nlohmann::json& panel : dashboard["panels"]) {
    if (!panel.contains("targets")) continue;
    const std::string unit = panel["fieldConfig"]["defaults"].value("unit", "");
    const std::string title = panel.value("title", "");
    bool has_timestamp = false, has_duration = false;
    for (const nlohmann::json& target : panel["targets"]) {
      const std::string expr = target.value("expr", "");
      if (std::regex_search(expr, timestamp)) {
        has_timestamp = true;
        EXPECT_TRUE(expr.size() > 7 && expr.compare(expr.size() - 7, 7, " * 1000") == 0) << title << ": " << expr;
      } else if (std::regex_search(expr, duration)) {
        has_duration = true;
      }
    }
    if (has_timestamp) {
      ++timestamp_panels;
      EXPECT_EQ(unit.rfind("dateTime", 0), 0u) << title << ": unit " << unit;
    } else if (has_duration) {
      ++duration_panels;
      EXPECT_EQ(unit, "s") << title;
    }
  }
  EXPECT_EQ(timestamp_panels, 2);  // the regressions and change points tables
  EXPECT_GE(duration_panels, 5);   // best latency, the bench history latencies, RPC times
}

TEST(Dashboards, PrometheusConfigScrapesTheDefaultMetricsAddress) {
  std::ifstream in(FUSETUNE_PROMETHEUS_YML);
  ASSERT_TRUE(in) << FUSETUNE_PROMETHEUS_YML;
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find("job_name: fusetune"), std::string::npos);
  EXPECT_NE(ss.str().find("127.0.0.1:9464"), std::string::npos);  // `fusetune serve --metrics` default
  EXPECT_NE(ss.str().find("job_name: fusetune-worker"), std::string::npos);
}

}  // namespace
}  // namespace fusetune
