// Every query of the Grafana dashboard (panels, annotations, variables) runs through the real
// Prometheus server (Debian's /usr/bin/prometheus) scraping a tuning server whose database
// holds a synthetic bench history: 40 commits of one suite with a planted 3 % step on one
// cell, a drift of five 0.7 % steps on another, the step's regressed verdict and the change
// points (given through ServerOptions::list_change_points). Each query must parse, and the
// bench history panels and the annotations must return the planted data: latencies in
// seconds, the annotations' and the date columns' times in the Unix milliseconds Grafana
// reads (the series hold Unix seconds).
//
// Prometheus is a test dependency installed by the setup script; when it is missing this
// test FAILS (it does not skip).

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include "fusetune/db/store.h"
#include "fusetune/service/metric_names.h"
#include "fusetune/service/server.h"
#include "gtest/gtest.h"
#include "prometheus_query.h"

namespace fusetune::testing {
namespace {

constexpr char kToken[] = "dashboard-queries-test-token";
constexpr char kSuite[] = "cpu-nightly";
constexpr int kCommits = 40;
constexpr int kStepCommit = 25;                          // the first commit 3 % slower
constexpr int kDriftCommits[] = {10, 15, 20, 25, 30};    // each 0.7 % slower than the one before
constexpr int64_t kFirstRunMs = 1700000000000;          // commit i's run finished at + i hours
constexpr int64_t kHourMs = 3600 * 1000;

constexpr char kStepProblem[] = "prefill/b1/hq8/hkv8/q256/k256/d64/causal0/fp32";
constexpr char kDriftProblem[] = "prefill/b1/hq8/hkv8/q512/k512/d64/causal1/fp32";
constexpr char kStepConfig[] = "fused/bm64/bs64/t1/fp32/st1";
constexpr char kMaterializedConfig[] = "materialized/bm64/bs64/t1/fp32/st1";
constexpr char kDriftConfig[] = "fused/bm32/bs64/t1/tf32/st1";
constexpr double kStepBaseUs = 100, kMaterializedUs = 400, kDriftBaseUs = 50;
constexpr double kFp32Error = 2e-6, kTf32Error = 3e-4;

std::string Commit(int i) {
  char hex[41];
  std::snprintf(hex, sizeof hex, "%040x", 0x5eed00 + i);
  return hex;
}

DeviceInfo TestDevice() {
  DeviceInfo d;
  d.backend = "cpu";
  d.name = "Test CPU";
  d.arch = "x86_64";
  return d;
}

double StepCellUs(int i) { return i >= kStepCommit ? kStepBaseUs * 1.03 : kStepBaseUs; }
double DriftCellUs(int i) {
  int steps = 0;
  for (int at : kDriftCommits) steps += i >= at ? 1 : 0;
  return kDriftBaseUs * std::pow(1.007, steps);
}
// The exported latency of a cell of `us`.
double Seconds(double us) { return us / 1e6; }

BenchCell Cell(const std::string& problem, const std::string& config, const std::string& role, double median_us,
               double max_rel_error) {
  BenchCell c;
  c.suite = kSuite;
  c.problem_key = problem;
  c.problem_json = "{}";
  c.config_key = config;
  c.role = role;
  c.max_rel_error = max_rel_error;
  c.tolerance = 1e-3;
  // Three blocks around the median: the cell's median is `median_us` exactly.
  c.blocks = {{20, median_us * 0.999, {}, {}, false}, {20, median_us, {}, {}, false}, {20, median_us * 1.001, {}, {}, false}};
  return c;
}

// The synthetic history, written with the Store API before the server opens the file.
void WriteHistory(const std::string& db_path) {
  auto store = Store::Open(db_path);
  ASSERT_TRUE(store.ok()) << store.status();
  for (int i = 0; i < kCommits; ++i) {
    RunInfo run;
    run.commit = Commit(i);
    run.host = "bench-host";
    run.device = TestDevice();
    run.label = "bench";
    run.started_unix_ms = kFirstRunMs + i * kHourMs;
    auto id = (*store)->BeginRun(run);
    ASSERT_TRUE(id.ok()) << id.status();
    ASSERT_TRUE((*store)
                    ->RecordBenchCells(*id, {Cell(kStepProblem, kStepConfig, "best", StepCellUs(i), kFp32Error),
                                             Cell(kStepProblem, kMaterializedConfig, "materialized", kMaterializedUs,
                                                  kFp32Error),
                                             Cell(kDriftProblem, kDriftConfig, "best", DriftCellUs(i), kTf32Error)})
                    .ok());
    ASSERT_TRUE((*store)->FinishRun(*id).ok());
  }
  Regression step;
  step.commit = Commit(kStepCommit);
  step.baseline_commit = Commit(kStepCommit - 1);
  step.device_class = TestDevice().DeviceClass();
  step.problem_key = kStepProblem;
  step.config_key = kStepConfig;
  step.metric = "latency";
  step.ratio = 1.03;
  step.p_value = 1e-4;
  step.verdict = "regressed";
  step.created_unix_ms = kFirstRunMs + kStepCommit * kHourMs + 60000;
  Regression drift = step;  // each drift step is below the pairwise threshold
  drift.commit = Commit(kDriftCommits[2]);
  drift.baseline_commit = Commit(kDriftCommits[2] - 1);
  drift.problem_key = kDriftProblem;
  drift.config_key = kDriftConfig;
  drift.ratio = 1.007;
  drift.p_value = 0.4;
  drift.verdict = "same";
  ASSERT_TRUE((*store)->RecordRegressions({step, drift}).ok());
}

// The change points a detector finds in the history: the step (at its run's finish time),
// and the drift as one change (at a time of its own).
constexpr int64_t kDriftMarkMs = kFirstRunMs + kDriftCommits[2] * kHourMs;
std::vector<ChangePointMark> PlantedChangePoints() {
  const std::string device_class = TestDevice().DeviceClass();
  return {{device_class, kSuite, kStepProblem, kStepConfig, Commit(kStepCommit), "slower", 0},
          {device_class, kSuite, kDriftProblem, kDriftConfig, Commit(kDriftCommits[2]), "slower", kDriftMarkMs}};
}

// Every query string of the dashboard with its variables at "All" (Grafana's allValue ".*").
// A variable's label_values(selector, label) is checked as its selector.
std::vector<std::string> DashboardQueries(const nlohmann::json& node) {
  std::vector<std::string> out;
  if (node.is_object()) {
    for (auto it = node.begin(); it != node.end(); ++it) {
      if ((it.key() == "expr" || it.key() == "definition") && it.value().is_string()) {
        std::string q = it.value().get<std::string>();
        static const std::regex label_values("^label_values\\((.*), *[a-z_]+\\)$");
        std::smatch m;
        if (std::regex_match(q, m, label_values)) q = m[1];
        for (const char* variable : {"$device_class", "$suite", "$problem"}) {
          for (size_t at; (at = q.find(variable)) != std::string::npos;) q.replace(at, std::strlen(variable), ".*");
        }
        out.push_back(q);
      } else {
        for (std::string& q : DashboardQueries(it.value())) out.push_back(std::move(q));
      }
    }
  } else if (node.is_array()) {
    for (const auto& child : node) {
      for (std::string& q : DashboardQueries(child)) out.push_back(std::move(q));
    }
  }
  return out;
}

// label value -> sample value over an instant query's result, for the series whose `filter`
// labels match.
std::map<std::string, double> ValuesBy(const nlohmann::json& result, const std::string& label,
                                       const std::map<std::string, std::string>& filter = {}) {
  std::map<std::string, double> out;
  for (const auto& sample : result) {
    const auto& metric = sample["metric"];
    bool match = true;
    for (const auto& [k, v] : filter) match = match && metric.value(k, "") == v;
    if (match) out[metric.value(label, "")] = std::stod(sample["value"][1].get<std::string>());
  }
  return out;
}

class DashboardQueriesTest : public ::testing::Test {
 protected:
  // The instant result of `promql`; fails the test when Prometheus rejects it.
  nlohmann::json Instant(const std::string& promql) {
    std::string error;
    auto result = PrometheusResult(prometheus_port_, "/api/v1/query?query=" + UrlEncode(promql), &error);
    EXPECT_TRUE(result.has_value()) << promql << ": " << error;
    return result.value_or(nlohmann::json::array());
  }

  TempDir dir_;
  int prometheus_port_ = 0;
};

TEST_F(DashboardQueriesTest, EveryPanelAndAnnotationQueryReturnsThePlantedHistory) {
  ASSERT_TRUE(std::filesystem::exists(kPrometheusBinary))
      << kPrometheusBinary << " is missing: install it with `apt-get install -y --no-install-recommends prometheus` "
      << "(the setup script does)";
  std::ifstream in(FUSETUNE_DASHBOARD_JSON);
  auto dashboard = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(dashboard.is_discarded()) << FUSETUNE_DASHBOARD_JSON;

  WriteHistory(dir_.File("fusetune.db"));
  ServerOptions options;
  options.db_path = dir_.File("fusetune.db");
  options.token = kToken;
  options.metrics_address = "127.0.0.1:0";
  options.refresh_ms = 200;
  options.list_change_points = [](Store&) -> absl::StatusOr<std::vector<ChangePointMark>> {
    return PlantedChangePoints();
  };
  // Two replicas over the one database, scraped as two targets of one job: every panel and
  // annotation must show each series once, not once per replica.
  options.replica = "replica-a";
  auto server = Server::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  options.replica = "replica-b";
  auto second = Server::Start(options);
  ASSERT_TRUE(second.ok()) << second.status();

  std::unique_ptr<Subprocess> prometheus = StartPrometheus(
      dir_, {{"fusetune", (*server)->metrics_port()}, {"fusetune", (*second)->metrics_port()}}, &prometheus_port_);
  ASSERT_TRUE(prometheus->started());
  // Wait for two scrapes of the whole history from both replicas (rate() panels need two samples).
  const std::string count_cells = "count(" + std::string(kBenchLatencySeconds) + ")";
  const char kFewestScrapes[] = "min(count_over_time(up{job=\"fusetune\"}[1m]))";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (std::chrono::steady_clock::now() < deadline) {
    ASSERT_FALSE(prometheus->Poll().has_value()) << "prometheus exited:\n" << prometheus->Stderr();
    const std::optional<double> cells = QueryScalar(prometheus_port_, count_cells);
    if (cells == 2 * 3.0 * kCommits && QueryScalar(prometheus_port_, kFewestScrapes) >= 2.0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ASSERT_EQ(QueryScalar(prometheus_port_, count_cells), 2 * 3.0 * kCommits) << prometheus->Stderr();
  ASSERT_GE(QueryScalar(prometheus_port_, kFewestScrapes), 2.0) << prometheus->Stderr();

  // Every query parses and evaluates (the service and worker panels may be empty here).
  const std::vector<std::string> queries = DashboardQueries(dashboard);
  ASSERT_GE(queries.size(), 25u);
  std::map<std::string, nlohmann::json> results;
  for (const std::string& q : queries) results[q] = Instant(q);
  // The results of the dashboard queries that select `family` (one replica's series of it), of
  // the newest run only or not.
  const std::string kOneReplica = "max without (instance, replica) (";
  auto results_of = [&](const std::string& family, bool newest_run) {
    std::vector<const nlohmann::json*> out;
    for (const auto& [q, r] : results) {
      const bool selects = q.rfind(kOneReplica + family + "{", 0) == 0 || q.rfind(family + "{", 0) == 0 ||
                           q.rfind(kOneReplica + family + ")", 0) == 0;
      if (selects && newest_run == (q.find("fusetune_bench_run_position) == 0") != std::string::npos)) {
        out.push_back(&r);
      }
    }
    EXPECT_FALSE(out.empty()) << "no dashboard query starts with " << family << (newest_run ? " for the newest run" : "");
    return out;
  };
  // The result of the first of them.
  auto result_of = [&](const std::string& family, bool newest_run) -> const nlohmann::json& {
    static const nlohmann::json empty = nlohmann::json::array();
    const std::vector<const nlohmann::json*> all = results_of(family, newest_run);
    return all.empty() ? empty : *all.front();
  };
  const std::string newest = Commit(kCommits - 1);
  const std::map<std::string, std::string> step_cell{{"problem", kStepProblem}, {"config", kStepConfig}};
  const std::map<std::string, std::string> drift_cell{{"problem", kDriftProblem}, {"config", kDriftConfig}};

  // Latency per cell in seconds (the exposition's 16 digits may be off in the last place),
  // newest run: one series per cell, named by the newest commit.
  const double kSecondsTolerance = 1e-15;
  const nlohmann::json& latest = result_of(kBenchLatencySeconds, true);
  EXPECT_EQ(latest.size(), 3u) << latest.dump();
  ASSERT_EQ(ValuesBy(latest, "commit", step_cell).count(newest), 1u) << latest.dump();
  EXPECT_NEAR(ValuesBy(latest, "commit", step_cell)[newest], Seconds(kStepBaseUs * 1.03), kSecondsTolerance);
  ASSERT_EQ(ValuesBy(latest, "commit", drift_cell).count(newest), 1u);
  EXPECT_NEAR(ValuesBy(latest, "commit", drift_cell)[newest], Seconds(DriftCellUs(kCommits - 1)), kSecondsTolerance);

  // Over the commits: every commit's value, the step at its commit, the drift's five steps.
  const nlohmann::json& history = result_of(kBenchLatencySeconds, false);
  const std::map<std::string, double> step_by_commit = ValuesBy(history, "commit", step_cell);
  const std::map<std::string, double> drift_by_commit = ValuesBy(history, "commit", drift_cell);
  ASSERT_EQ(step_by_commit.size(), static_cast<size_t>(kCommits));
  ASSERT_EQ(drift_by_commit.size(), static_cast<size_t>(kCommits));
  const std::map<std::string, double> position = ValuesBy(result_of("fusetune_bench_run_position", false), "commit");
  // Each run finished while this test wrote the history: Unix seconds, near now.
  const std::map<std::string, double> finished = ValuesBy(Instant(kBenchRunFinishedTimestampSeconds), "commit");
  const double now_seconds =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (int i = 0; i < kCommits; ++i) {
    EXPECT_NEAR(step_by_commit.at(Commit(i)), Seconds(StepCellUs(i)), kSecondsTolerance) << i;
    EXPECT_NEAR(drift_by_commit.at(Commit(i)), Seconds(DriftCellUs(i)), kSecondsTolerance) << i;
    EXPECT_EQ(position.at(Commit(i)), kCommits - 1 - i) << i;
    ASSERT_EQ(finished.count(Commit(i)), 1u) << i;
    EXPECT_NEAR(finished.at(Commit(i)), now_seconds, 3600) << i;
  }

  // Speedup of the problem with a materialized cell, from the newest run.
  EXPECT_EQ(ValuesBy(result_of("fusetune_bench_speedup_vs_materialized", true), "problem"),
            (std::map<std::string, double>{{kStepProblem, kMaterializedUs / (kStepBaseUs * 1.03)}}));
  // Error per compute precision, from the newest run.
  EXPECT_EQ(ValuesBy(result_of("fusetune_bench_max_rel_error", true), "precision"),
            (std::map<std::string, double>{{"fp32", kFp32Error}, {"tf32", kTf32Error}}));
  // The verdict panels: the step's cell is the one regressed.
  EXPECT_EQ(ValuesBy(result_of("fusetune_regression_ratio", false), "verdict", step_cell),
            (std::map<std::string, double>{{"regressed", 1.03}}));
  const nlohmann::json& verdict_counts = result_of("fusetune_regressions_latest", false);
  EXPECT_EQ(verdict_counts.size(), Instant("fusetune_regressions_latest").size() / 2) << verdict_counts.dump();
  EXPECT_EQ(ValuesBy(verdict_counts, "verdict")["regressed"], 1.0);

  // The annotations and the tables: the step's commit is marked both ways, at the planted
  // times, in Unix milliseconds (what Grafana's "series value as timestamp" and date units read).
  const std::vector<const nlohmann::json*> regression_queries = results_of(kRegressionDetectedTimestampSeconds, false);
  EXPECT_EQ(regression_queries.size(), 2u);  // the annotation and the table
  for (const nlohmann::json* result : regression_queries) {
    EXPECT_EQ(result->size(), 1u) << "one event, not one per replica: " << result->dump();
    EXPECT_EQ(ValuesBy(*result, "commit"),
              (std::map<std::string, double>{
                  {Commit(kStepCommit), static_cast<double>(kFirstRunMs + kStepCommit * kHourMs + 60000)}}));
  }
  const std::vector<const nlohmann::json*> change_point_queries = results_of(kChangePointTimestampSeconds, false);
  EXPECT_EQ(change_point_queries.size(), 2u);
  for (const nlohmann::json* result : change_point_queries) {
    EXPECT_EQ(result->size(), 2u) << "two events, not two per replica: " << result->dump();
    EXPECT_EQ(ValuesBy(*result, "commit"),
              (std::map<std::string, double>{{Commit(kStepCommit), finished.at(Commit(kStepCommit)) * 1000},
                                             {Commit(kDriftCommits[2]), static_cast<double>(kDriftMarkMs)}}));
  }
  // Grafana evaluates annotations as range queries: the step's commit is in that answer too.
  for (const auto& annotation : dashboard["annotations"]["list"]) {
    std::string expr = annotation["expr"].get<std::string>();
    for (const char* variable : {"$device_class", "$suite"}) {
      for (size_t at; (at = expr.find(variable)) != std::string::npos;) expr.replace(at, std::strlen(variable), ".*");
    }
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::string error;
    auto range = PrometheusResult(prometheus_port_,
                                  "/api/v1/query_range?query=" + UrlEncode(expr) + "&start=" + std::to_string(now - 60) +
                                      "&end=" + std::to_string(now) + "&step=1",
                                  &error);
    ASSERT_TRUE(range.has_value()) << expr << ": " << error;
    bool step_marked = false;
    int step_series = 0;
    for (const auto& series : *range) {
      const bool step = series["metric"].value("commit", "") == Commit(kStepCommit);
      step_marked = step_marked || step;
      step_series += step;
    }
    EXPECT_EQ(step_series, 1) << annotation["name"] << ": one event, not one per replica";
    EXPECT_TRUE(step_marked) << annotation["name"] << ": " << range->dump();
  }
  EXPECT_EQ(QueryScalar(prometheus_port_, "max(fusetune_bench_series_dropped)"), 0.0);

  prometheus->Signal(SIGTERM);
  EXPECT_TRUE(prometheus->Wait(20).has_value());
}

}  // namespace
}  // namespace fusetune::testing
