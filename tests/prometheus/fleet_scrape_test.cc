// `fusetune serve` and `fusetune worker` as the README builds them (with the CUDA backend
// whenever nvcc was found, so the binary loads cuBLAS) serve /metrics, and the real
// Prometheus server scrapes both processes.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "common/ports.h"
#include "common/subprocess.h"
#include "fusetune/kernels/backend.h"
#include "gtest/gtest.h"
#include "prometheus_query.h"
#include "testing/http_get.h"

namespace fusetune::testing {
namespace {

constexpr int kDefaultMetricsPort = 9464;  // `fusetune serve --metrics` default

class FleetScrapeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("FUSETUNE_TOKEN");
    std::ofstream(dir_.File("token")) << "fleet-scrape-token\n";
  }

  // Starts `fusetune serve` with `extra` flags; the gRPC and metrics ports once serving.
  std::optional<std::pair<int, int>> StartServe(std::vector<std::string> extra) {
    std::vector<std::string> argv = {FUSETUNE_BINARY, "serve", "--listen", "127.0.0.1:0", "--db", dir_.File("f.db"),
                                     "--token-file", dir_.File("token"), "--port-file", dir_.File("ports"),
                                     "--refresh-ms", "200"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    serve_ = std::make_unique<Subprocess>(argv, dir_.path());
    int grpc_port = 0, metrics_port = 0;
    const bool up = WaitFor(
        [&] {
          std::istringstream ports(ReadFile(dir_.File("ports")));
          return static_cast<bool>(ports >> grpc_port >> metrics_port) || serve_->Poll().has_value();
        },
        60);
    if (!up || serve_->Poll().has_value()) return std::nullopt;
    return std::make_pair(grpc_port, metrics_port);
  }

  TempDir dir_;
  std::unique_ptr<Subprocess> serve_;
};

TEST_F(FleetScrapeTest, ServeWithItsDefaultMetricsAddressStartsAndServesMetrics) {
  if (!LoopbackPortIsFree(kDefaultMetricsPort)) {
    GTEST_SKIP() << "127.0.0.1:" << kDefaultMetricsPort << " is taken on this machine; the default cannot be tried";
  }
  auto ports = StartServe({});
  ASSERT_TRUE(ports.has_value()) << serve_->Stdout() << serve_->Stderr();
  EXPECT_EQ(ports->second, kDefaultMetricsPort);
  auto metrics = HttpGet(ports->second, "/metrics", 30000);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(metrics->status, 200);
  // Every series names the replica: by default the host name and the gRPC port.
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  const std::string replica = std::string(host) + ":" + std::to_string(ports->first);
  EXPECT_NE(metrics->body.find("fusetune_rpc_requests_total{code=\"OK\",method=\"GetBestConfig\",replica=\"" +
                               replica + "\"} 0"),
            std::string::npos)
      << metrics->body.substr(0, 3000);
  serve_->Signal(SIGTERM);
  EXPECT_EQ(serve_->Wait(30), 0) << serve_->Stderr();
}

TEST_F(FleetScrapeTest, ATakenMetricsPortIsReportedAsTakenNotAsABadAddress) {
  auto first = StartServe({"--metrics", "127.0.0.1:0"});
  ASSERT_TRUE(first.has_value()) << serve_->Stderr();
  const std::string taken = "127.0.0.1:" + std::to_string(first->second);
  CommandResult second = RunCommand({FUSETUNE_BINARY, "serve", "--listen", "127.0.0.1:0", "--db", dir_.File("g.db"),
                                     "--token-file", dir_.File("token"), "--metrics", taken},
                                    60);
  EXPECT_EQ(second.exit_code, 1) << second.err;
  EXPECT_NE(second.err.find("Address already in use"), std::string::npos) << second.err;
  EXPECT_EQ(second.err.find("invalid"), std::string::npos) << second.err;
  CommandResult bad = RunCommand({FUSETUNE_BINARY, "serve", "--listen", "127.0.0.1:0", "--db", dir_.File("h.db"),
                                  "--token-file", dir_.File("token"), "--metrics", "127.0.0.1"},
                                 60);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;  // a malformed address is a usage error
}

TEST_F(FleetScrapeTest, PrometheusScrapesTheServeAndWorkerProcesses) {
  ASSERT_TRUE(std::filesystem::exists(kPrometheusBinary))
      << kPrometheusBinary << " is missing: install it with `apt-get install -y --no-install-recommends prometheus` "
      << "(the setup script does)";
  auto ports = StartServe({"--metrics", "127.0.0.1:0"});
  ASSERT_TRUE(ports.has_value()) << serve_->Stderr();
  const int worker_metrics_port = FreeLoopbackPort();
  ASSERT_GT(worker_metrics_port, 0);
  const std::string server = "127.0.0.1:" + std::to_string(ports->first);
  Subprocess worker({FUSETUNE_BINARY, "worker", "--server", server, "--token-file", dir_.File("token"), "--spool",
                     dir_.File("spool"), "--worker-id", "fleet", "--lease-wait-ms", "300", "--metrics",
                     "127.0.0.1:" + std::to_string(worker_metrics_port)},
                    dir_.path());
  ASSERT_TRUE(worker.started());

  auto backend = CreateBackend("cpu");
  ASSERT_TRUE(backend.ok()) << backend.status();
  CommandResult submit = RunCommand({FUSETUNE_BINARY, "submit", "--server", server, "--token-file",
                                     dir_.File("token"), "--device-class", (*backend)->Describe().DeviceClass(),
                                     "--seq", "64", "--heads", "2", "--head-dim", "32", "--max-trials", "1",
                                     "--wait", "--wait-timeout", "120"},
                                    180);
  ASSERT_EQ(submit.exit_code, 0) << submit.out << submit.err << worker.Stderr();

  int prometheus_port = 0;
  std::unique_ptr<Subprocess> prometheus_process =
      StartPrometheus(dir_, {{"fusetune", ports->second}, {"fusetune-worker", worker_metrics_port}}, &prometheus_port);
  Subprocess& prometheus = *prometheus_process;
  ASSERT_TRUE(prometheus.started());
  auto query = [&](const std::string& promql) { return QueryScalar(prometheus_port, promql); };
  std::optional<double> server_up, worker_up, completed, recorded;
  WaitFor(
      [&] {
        server_up = query("up{job=\"fusetune\"}");
        worker_up = query("up{job=\"fusetune-worker\"}");
        completed = query("fusetune_worker_jobs_total{outcome=\"completed\"}");
        recorded = query("fusetune_trials_recorded_total");
        return server_up == 1.0 && worker_up == 1.0 && completed == 1.0 && recorded.value_or(0) > 0;
      },
      90);
  EXPECT_EQ(server_up, 1.0) << prometheus.Stderr();
  EXPECT_EQ(worker_up, 1.0) << prometheus.Stderr() << worker.Stderr();
  EXPECT_EQ(completed, 1.0);
  EXPECT_GT(recorded.value_or(0), 0);
  EXPECT_EQ(query("fusetune_worker_jobs_total{outcome=\"lost\"}"), 0.0);

  worker.Signal(SIGTERM);
  EXPECT_EQ(worker.Wait(60), 0) << worker.Stderr();
  prometheus.Signal(SIGTERM);
  prometheus.Wait(30);
}

}  // namespace
}  // namespace fusetune::testing
