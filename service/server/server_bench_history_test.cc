// The bench history a server exports: the newest run of each of the last kBenchHistoryCommits
// commits per (device class, suite), read from the store at start-up, and the change points
// given by ServerOptions::list_change_points.
#include <cmath>
#include <ctime>
#include <string>

#include "fusetune/db/store.h"
#include "fusetune/service/metric_names.h"
#include "fusetune/service/server.h"
#include "metrics.h"
#include "server_test_util.h"
#include "testing/http_get.h"

namespace fusetune::testing {
namespace {

constexpr char kConfig[] = "fused/bm64/bs64/t1/fp32/st1";
constexpr char kProblem[] = "prefill/b1/hq1/hkv1/q64/k64/d64/causal0/fp32";

DeviceInfo Device(const std::string& name) {
  DeviceInfo d;
  d.backend = "cpu";
  d.name = name;
  d.arch = "x86_64";
  return d;
}

void BenchRun(Store& store, const std::string& suite, const DeviceInfo& device, const std::string& commit,
              double median_us) {
  RunInfo run;
  run.commit = commit;
  run.device = device;
  run.label = "bench";
  const int64_t id = *store.BeginRun(run);
  BenchCell cell;
  cell.suite = suite;
  cell.problem_key = kProblem;
  cell.problem_json = "{}";
  cell.config_key = kConfig;
  cell.role = "best";
  cell.blocks = {{10, median_us, {}, {}, false}};
  ASSERT_TRUE(store.RecordBenchCells(id, {cell}).ok());
  ASSERT_TRUE(store.FinishRun(id).ok());
}

std::string LatencyLine(const std::string& commit, const std::string& device_class, const std::string& suite) {
  return kBenchLatencySeconds + std::string("{commit=\"") + commit + "\",config=\"" + kConfig + "\",device_class=\"" +
         device_class + "\",problem=\"" + kProblem + "\",role=\"best\",suite=\"" + suite + "\"} ";
}

// The value of the sample that starts with `line` (a LatencyLine) in the exposition `text`;
// NaN (which no expectation matches) when there is none.
double SampleValue(const std::string& text, const std::string& line) {
  const size_t at = text.find(line);
  if (at == std::string::npos) return std::nan("");
  return std::stod(text.substr(at + line.size(), text.find('\n', at) - at - line.size()));
}

TEST(ServerBenchHistory, KeepsTheNewestRunOfTheLastCommitsPerDeviceClassAndSuite) {
  ScratchDir dir;
  const int commits = kBenchHistoryCommits + 2;
  {
    auto store = Store::Open(dir.File("fusetune.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < commits; ++i) BenchRun(**store, "nightly", Device("A"), "commit" + std::to_string(i), 10 + i);
    BenchRun(**store, "nightly", Device("A"), "commit5", 99);  // a re-run of an old commit: now its newest
    BenchRun(**store, "nightly", Device("B"), "commit0", 7);
    BenchRun(**store, "smoke", Device("A"), "commit0", 3);
  }
  ServerOptions options;
  options.db_path = dir.File("fusetune.db");
  options.token = kToken;
  options.refresh_ms = 3600 * 1000;  // the series seen here are the start-up refresh's
  options.list_change_points = [](Store&) -> absl::StatusOr<std::vector<ChangePointMark>> {
    return std::vector<ChangePointMark>{{Device("A").DeviceClass(), "nightly", kProblem, kConfig, "commit9", "slower", 0}};
  };
  auto server = Server::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto page = HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  const std::string& text = page->body;
  const std::string a = Device("A").DeviceClass(), b = Device("B").DeviceClass();

  // Seconds (the exposition prints 16 digits: 99 µs is 9.899999999999999e-05).
  EXPECT_NEAR(SampleValue(text, LatencyLine("commit5", a, "nightly")), 99e-6, 1e-15) << text;
  EXPECT_NE(text.find("fusetune_bench_run_position{commit=\"commit5\",device_class=\"" + a + "\",suite=\"nightly\"} 0"),
            std::string::npos);
  EXPECT_NEAR(SampleValue(text, LatencyLine("commit" + std::to_string(commits - 1), a, "nightly")),
              (10 + commits - 1) * 1e-6, 1e-15);
  // 50 commits: the re-run moved commit5 up, so the two oldest others fell out.
  EXPECT_EQ(text.find(LatencyLine("commit0", a, "nightly")), std::string::npos);
  EXPECT_EQ(text.find(LatencyLine("commit1", a, "nightly")), std::string::npos);
  EXPECT_NE(text.find(LatencyLine("commit2", a, "nightly")), std::string::npos);
  // Other device classes and suites keep their own history.
  EXPECT_NEAR(SampleValue(text, LatencyLine("commit0", b, "nightly")), 7e-6, 1e-15);
  EXPECT_NEAR(SampleValue(text, LatencyLine("commit0", a, "smoke")), 3e-6, 1e-15);
  EXPECT_NE(text.find(kChangePointTimestampSeconds + std::string("{commit=\"commit9\"")), std::string::npos) << text;
  EXPECT_NE(text.find("fusetune_bench_series_dropped 0"), std::string::npos);
}

TEST(ServerBenchHistory, StoredChangePointsAreMarkedAtTheirCommitsRun) {
  ScratchDir dir;
  {
    auto store = Store::Open(dir.File("fusetune.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < 3; ++i) BenchRun(**store, "nightly", Device("A"), "commit" + std::to_string(i), 10 + i);
    ChangePointRow row;
    row.commit = "commit1";
    row.position = 1;
    row.mean_before_us = 10;
    row.mean_after_us = 11;
    row.ratio = 1.1;
    row.p_value = 0.0001;
    row.direction = "slower";
    ASSERT_TRUE((*store)->ReplaceChangePoints(Device("A").DeviceClass(), "nightly", kProblem, kConfig, {row}).ok());
  }
  ServerOptions options;
  options.db_path = dir.File("fusetune.db");
  options.token = kToken;
  options.refresh_ms = 3600 * 1000;
  auto server = Server::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto page = HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok());
  // Marked at its run's finish time, both in Unix seconds.
  const std::string a = Device("A").DeviceClass();
  const double marked = SampleValue(page->body, kChangePointTimestampSeconds + std::string("{commit=\"commit1\",config=\"") +
                                                    kConfig + "\",device_class=\"" + a + "\",direction=\"slower\",problem=\"" +
                                                    kProblem + "\",suite=\"nightly\"} ");
  const double finished = SampleValue(
      page->body, kBenchRunFinishedTimestampSeconds + std::string("{commit=\"commit1\",device_class=\"") + a + "\",suite=\"nightly\"} ");
  EXPECT_EQ(marked, finished) << page->body;
  EXPECT_NEAR(finished, static_cast<double>(std::time(nullptr)), 24 * 3600) << page->body;
}

}  // namespace
}  // namespace fusetune::testing
