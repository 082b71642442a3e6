// `fusetune serve` over a PostgreSQL store, as real processes: a worker leases, runs and
// completes a job through it (the fenced lease path on PostgreSQL: SKIP LOCKED, the database's
// clock, lease tokens), the results are in PostgreSQL, and `report --db URL` reads them. Uses
// the throw-away cluster of db/src/testing/postgres_cluster.h; skipped without one.
#include <chrono>
#include <csignal>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/subprocess.h"
#include "fusetune/db/store.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/postgres_cluster.h"

namespace fusetune::testing {
namespace {

using db_test::PostgresTestCluster;

// A database that cannot be reached when serve starts: a clear error naming the database (its
// password hidden) and exit 1, before anything listens. Needs no PostgreSQL server.
TEST(ServicePostgres, ServeRefusesToStartOnAnUnreachableDatabaseWithoutPrintingThePassword) {
  ::unsetenv("FUSETUNE_TOKEN");
  TempDir dir;
  const std::string token_file = dir.File("token");
  std::ofstream(token_file) << "pg-test-token\n";
  CommandResult serve = RunCommand({FUSETUNE_BINARY, "serve", "--listen", "127.0.0.1:0", "--metrics", "off",
                                    "--db", "postgresql://fusetune:hunter2@127.0.0.1:1/fleet", "--token-file",
                                    token_file},
                                   60);
  EXPECT_EQ(serve.exit_code, 1) << serve.err;
  EXPECT_NE(serve.err.find("cannot reach database postgresql://fusetune:***@127.0.0.1:1/fleet"), std::string::npos)
      << serve.err;
  EXPECT_EQ(serve.err.find("hunter2"), std::string::npos) << serve.err;
}

TEST(ServicePostgres, AWorkerRunsAJobThroughServeOverPostgres) {
  absl::StatusOr<PostgresTestCluster*> cluster = PostgresTestCluster::Shared();
  if (!cluster.ok()) GTEST_SKIP() << "PostgreSQL tests skipped: " << cluster.status().message();
  absl::StatusOr<std::string> url = (*cluster)->CreateDatabase();
  ASSERT_TRUE(url.ok()) << url.status();
  ::unsetenv("FUSETUNE_TOKEN");
  TempDir dir;
  const std::string token_file = dir.File("token");
  std::ofstream(token_file) << "pg-test-token\n";

  const std::string port_file = dir.File("ports");
  Subprocess serve({FUSETUNE_BINARY, "serve", "--listen", "127.0.0.1:0", "--db", *url, "--metrics", "off",
                    "--token-file", token_file, "--port-file", port_file},
                   dir.path());
  int port = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        std::istringstream ports(ReadFile(port_file));
        return (ports >> port) && port > 0;
      },
      60))
      << serve.Stderr();
  const std::string address = "127.0.0.1:" + std::to_string(port);

  Subprocess worker({FUSETUNE_BINARY, "worker", "--server", address, "--token-file", token_file, "--cpu-devices", "1",
                     "--spool", dir.File("spool"), "--worker-id", "pg-worker", "--max-jobs", "1"},
                    dir.path());
  const std::string kRegistered = "] registered ";
  ASSERT_TRUE(WaitFor([&] { return worker.Stderr().find(kRegistered) != std::string::npos; }, 60))
      << worker.Stderr();
  const std::string log = worker.Stderr();
  const size_t from = log.find(kRegistered) + kRegistered.size();
  const std::string device_class = log.substr(from, log.find(' ', from) - from);

  CommandResult submit = RunCommand({FUSETUNE_BINARY, "submit", "--server", address, "--token-file", token_file,
                                     "--device-class", device_class, "--seq", "64", "--heads", "1", "--head-dim", "32",
                                     "--max-trials", "2", "--variants", "fused", "--wait", "--wait-timeout", "120"},
                                    180);
  EXPECT_EQ(submit.exit_code, 0) << submit.err << submit.out << worker.Stderr();
  EXPECT_EQ(worker.Wait(60), 0) << worker.Stderr();
  serve.Signal(SIGTERM);
  EXPECT_EQ(serve.Wait(15), 0) << serve.Stderr();

  // What the service wrote is in PostgreSQL: the job done under its first lease, its best config.
  auto store = Store::Open(*url);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::vector<Job>> jobs = (*store)->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].state, JobState::kDone);
  EXPECT_EQ((*jobs)[0].lease_token, 1);
  EXPECT_EQ((*jobs)[0].leased_by, "pg-worker-d0");
  CommandResult report = RunCommand({FUSETUNE_BINARY, "report", "--db", *url}, 60);
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("prefill/b1/hq1/hkv1/q64/k64/d32"), std::string::npos) << report.out;
}

}  // namespace
}  // namespace fusetune::testing
