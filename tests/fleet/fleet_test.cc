// A fleet as processes: three `fusetune serve` replicas over one PostgreSQL database (the
// throw-away cluster of db/src/testing/postgres_cluster.h), six CPU workers each given all
// three addresses, 60 small tune jobs. The first 50 are queued before the workers start; mid-run
// one replica is SIGKILLed while trials are being uploaded, PostgreSQL is stopped as a crash
// would and started again after the workers saw it gone, the killed replica is started again,
// and once the first 50 jobs are done and every worker waits
// in a long-poll another replica is SIGKILLed and the last 10 jobs are submitted through the
// third. Then: every job is done, completed exactly once; no trial is left in a spool and
// every job has its trials and best config in the database; every replica answers
// GetBestConfig with the database's best config for each problem.
//
// Nothing waits on a fixed time: each step waits for a condition (jobs done, trials stored, a
// log line) with deadlines far beyond what a loaded 2-core box needs.
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/ports.h"
#include "common/subprocess.h"
#include "fusetune/db/store.h"
#include "fusetune/worker/spool.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/postgres_cluster.h"

namespace fusetune::testing {
namespace {

using db_test::PostgresTestCluster;

constexpr int kReplicas = 3;
constexpr int kWorkers = 6;
constexpr int kJobs = 60;
constexpr int kFirstBatch = 50;
constexpr double kDeadlineS = 240;  // per waited-for condition; the whole run takes far less

int SeqOf(int job) { return 32 + 4 * job; }  // one problem per job, each its own

class FleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<PostgresTestCluster*> cluster = PostgresTestCluster::Shared();
    if (!cluster.ok()) GTEST_SKIP() << "PostgreSQL tests skipped: " << cluster.status().message();
    cluster_ = *cluster;
    absl::StatusOr<std::string> url = cluster_->CreateDatabase();
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
    ::unsetenv("FUSETUNE_TOKEN");
    token_file_ = dir_.File("token");
    std::ofstream(token_file_) << "fleet-token\n";
    for (int r = 0; r < kReplicas; ++r) {
      ports_[r] = FreeLoopbackPort();
      ASSERT_GT(ports_[r], 0);
    }
  }

  std::string Address(int r) const { return "127.0.0.1:" + std::to_string(ports_[r]); }

  // Starts replica r on its port (again, after a kill) and waits until it serves.
  void StartReplica(int r) {
    const std::string port_file = dir_.File("ports-" + std::to_string(r) + "-" + std::to_string(++starts_));
    replicas_[r] = std::make_unique<Subprocess>(
        std::vector<std::string>{FUSETUNE_BINARY, "serve", "--listen", Address(r), "--db", url_, "--metrics", "off",
                                 "--token-file", token_file_, "--port-file", port_file, "--replica",
                                 "r" + std::to_string(r), "--replica-poll-ms", "100", "--lease-ms", "20000",
                                 "--heartbeat-ms", "1000"},
        dir_.path());
    ASSERT_TRUE(WaitFor([&] { return !ReadFile(port_file).empty() || replicas_[r]->Poll().has_value(); }, kDeadlineS))
        << "replica " << r << " did not start";
    ASSERT_FALSE(ReadFile(port_file).empty()) << replicas_[r]->Stderr();
  }

  void Kill(int r) {
    replicas_[r]->Signal(SIGKILL);
    replicas_[r]->Wait(60);
  }

  // The server list of worker w: every replica, starting at a different one, so that the
  // workers spread over the replicas.
  std::string ServerList(int w) const {
    std::string list;
    for (int i = 0; i < kReplicas; ++i) {
      if (!list.empty()) list += ",";
      list += Address((w + i) % kReplicas);
    }
    return list;
  }

  void StartWorker(int w) {
    workers_[w] = std::make_unique<Subprocess>(
        std::vector<std::string>{FUSETUNE_BINARY, "worker", "--server", ServerList(w), "--token-file", token_file_,
                                 "--cpu-devices", "1", "--spool", dir_.File("spool"), "--worker-id",
                                 "fw" + std::to_string(w), "--lease-wait-ms", "20000", "--backoff-max-ms", "500",
                                 // A job of 4 trials then takes about a second, so that the
                                 // kills below find jobs under way whatever the box's speed.
                                 "--testing-trial-delay-ms", "200"},
        dir_.path());
  }

  int64_t Submit(int job, int replica) {
    CommandResult r = RunCommand({FUSETUNE_BINARY, "submit", "--server", Address(replica), "--token-file",
                                  token_file_, "--device-class", device_class_, "--seq", std::to_string(SeqOf(job)),
                                  "--heads", "1", "--head-dim", "32", "--max-trials", "2", "--variants", "fused",
                                  "--json"},
                                 120);
    EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
    if (r.exit_code != 0) return 0;
    return nlohmann::json::parse(r.out).at("job_id").get<int64_t>();
  }

  // Jobs by state, read from the database through a connection of the test's own.
  // The test's own connection to the database (opened again after an outage).
  Store* Db() {
    if (!store_) {
      auto store = Store::Open(url_);
      if (store.ok()) store_ = std::move(*store);
    }
    return store_.get();
  }

  std::map<JobState, int64_t> JobCounts() {
    std::map<JobState, int64_t> out;
    if (Db() == nullptr) return out;
    auto counts = store_->CountJobsByState();
    if (!counts.ok()) return out;
    for (const auto& [state, n] : *counts) out[state] = n;
    return out;
  }
  int64_t Done() { return JobCounts()[JobState::kDone]; }

  std::string AllWorkerLogs() const {
    std::string all;
    for (const auto& w : workers_) all += w->Stderr();
    return all;
  }

  // How many workers log `needle` at least `times` times.
  int WorkersLogging(const std::string& needle, int times) const {
    int n = 0;
    for (const auto& w : workers_) {
      const std::string log = w->Stderr();
      int seen = 0;
      for (size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1)) ++seen;
      if (seen >= times) ++n;
    }
    return n;
  }

  PostgresTestCluster* cluster_ = nullptr;
  std::string url_;
  TempDir dir_;
  std::string token_file_;
  std::string device_class_;
  int ports_[kReplicas] = {};
  int starts_ = 0;
  std::unique_ptr<Subprocess> replicas_[kReplicas];
  std::unique_ptr<Subprocess> workers_[kWorkers];
  std::unique_ptr<Store> store_;
};

TEST_F(FleetTest, ThreeReplicasSixWorkersSixtyJobsThroughKillsAndADatabaseRestart) {
  for (int r = 0; r < kReplicas; ++r) StartReplica(r);
  const std::string kRegistered = "] registered ";
  // The device class the workers register with, from a probe worker that leaves before any job
  // is queued: the first batch is then queued before a worker can lease, and the faults below
  // find jobs under way however slowly this test's own process (and `fusetune submit`) runs.
  {
    Subprocess probe({FUSETUNE_BINARY, "worker", "--server", ServerList(0), "--token-file", token_file_,
                      "--cpu-devices", "1", "--spool", dir_.File("probe-spool"), "--worker-id", "fw-probe"},
                     dir_.path());
    ASSERT_TRUE(WaitFor([&] { return probe.Stderr().find(kRegistered) != std::string::npos || probe.Poll().has_value(); },
                        kDeadlineS));
    const std::string log = probe.Stderr();
    const size_t at = log.find(kRegistered);
    ASSERT_NE(at, std::string::npos) << log;
    const size_t from = at + kRegistered.size();
    device_class_ = log.substr(from, log.find(' ', from) - from);
    probe.Signal(SIGTERM);
    EXPECT_EQ(probe.Wait(120), 0) << probe.Stderr();
  }

  // The first batch, spread over the replicas, then the workers.
  std::set<int64_t> job_ids;
  for (int j = 0; j < kFirstBatch; ++j) job_ids.insert(Submit(j, j % kReplicas));
  ASSERT_EQ(job_ids.size(), static_cast<size_t>(kFirstBatch));
  for (int w = 0; w < kWorkers; ++w) StartWorker(w);

  // Replica 0 dies while trials are being uploaded.
  // Each job takes at least 0.8 s of trial delays, so with 3 done the other 47 keep the six
  // workers uploading for several seconds more, however loaded the box.
  ASSERT_TRUE(WaitFor([&] { return Done() >= 3; }, kDeadlineS)) << AllWorkerLogs();
  Kill(0);
  const int64_t done_at_kill = Done();
  EXPECT_LT(done_at_kill, kFirstBatch) << "the jobs ran faster than the test can interrupt them";
  ASSERT_TRUE(WaitFor([&] { return Done() >= done_at_kill + 5; }, kDeadlineS))
      << "the fleet stopped after replica 0 died\n" << AllWorkerLogs();

  // At once, PostgreSQL goes away as in a crash, stays away until every replica's callers have
  // seen it (a worker logs a failed call), and comes back; then replica 0 starts again.
  EXPECT_LT(Done(), kFirstBatch) << "the database restart came after the jobs";
  const std::string before_outage = AllWorkerLogs();
  ASSERT_TRUE(cluster_->StopServer().ok());
  store_.reset();
  WaitFor([&] { return AllWorkerLogs().size() > before_outage.size() + 200; }, 30);
  ASSERT_TRUE(cluster_->StartServer().ok());
  for (int r = 1; r < kReplicas; ++r) EXPECT_FALSE(replicas_[r]->Poll().has_value()) << "replica " << r << " exited";
  StartReplica(0);

  // The first batch finishes; the workers then wait in long-polls.
  ASSERT_TRUE(WaitFor([&] { return Done() >= kFirstBatch; }, kDeadlineS)) << AllWorkerLogs();
  // Replica 1 dies under the waiting long-polls; the last jobs go in through replica 2 and
  // reach workers that were polling replica 1 (they move on) and replicas 0 and 2 (woken by
  // the shared-state poll).
  Kill(1);
  for (int j = kFirstBatch; j < kJobs; ++j) job_ids.insert(Submit(j, 2));
  ASSERT_EQ(job_ids.size(), static_cast<size_t>(kJobs));
  ASSERT_TRUE(WaitFor([&] { return Done() >= kJobs; }, kDeadlineS)) << AllWorkerLogs();
  StartReplica(1);

  // Workers stop (SIGTERM: upload what is left, then exit 0).
  for (auto& w : workers_) w->Signal(SIGTERM);
  for (int w = 0; w < kWorkers; ++w) EXPECT_EQ(workers_[w]->Wait(120), 0) << workers_[w]->Stderr();

  // Every job done, and completed exactly once (one "completed" line across all workers).
  ASSERT_NE(Db(), nullptr);
  auto jobs = store_->ListJobs(std::nullopt, 1000);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), static_cast<size_t>(kJobs));
  const std::string logs = AllWorkerLogs();
  // The database's outage was retried, never taken for a refusal.
  EXPECT_EQ(logs.find("completion refused"), std::string::npos) << logs;
  for (const Job& j : *jobs) {
    EXPECT_EQ(j.state, JobState::kDone) << j.job_id << ": " << j.error;
    const std::string line = "] job " + std::to_string(j.job_id) + " completed";
    int completions = 0;
    for (size_t at = logs.find(line); at != std::string::npos; at = logs.find(line, at + 1)) {
      const char next = at + line.size() < logs.size() ? logs[at + line.size()] : '\n';
      if (next == '\n') ++completions;
    }
    EXPECT_EQ(completions, 1) << "job " << j.job_id;
    // Its trials and its best config are in the database.
    EXPECT_GT(store_->CountTrials(j.run_id).value_or(0), 0) << "job " << j.job_id;
    ASSERT_EQ(j.problem_keys.size(), 1u);
    EXPECT_TRUE(store_->GetBestConfig(device_class_, j.problem_keys[0]).ok()) << j.problem_keys[0];
  }
  // No trial was lost: every spool is empty (each trial acknowledged after the database stored
  // it), and each worker uploaded every trial it recorded.
  for (int w = 0; w < kWorkers; ++w) {
    const std::string path = dir_.File("spool/fw" + std::to_string(w) + "-d0.spool");
    auto spool = TrialSpool::Open(path);
    ASSERT_TRUE(spool.ok()) << spool.status();
    EXPECT_EQ((*spool)->pending_count(), 0u) << path;
    std::smatch m;
    const std::string log = workers_[w]->Stderr();
    ASSERT_TRUE(std::regex_search(log, m, std::regex("(\\d+) trials recorded, (\\d+) uploaded"))) << log;
    EXPECT_EQ(m[1].str(), m[2].str()) << log;
  }

  // Every replica (the restarted ones included) answers each problem with the database's best
  // config (a replica reloads within its poll period: wait for it).
  auto best = store_->ListBestConfigs(device_class_);
  ASSERT_TRUE(best.ok()) << best.status();
  ASSERT_EQ(best->size(), static_cast<size_t>(kJobs));
  std::map<int, std::string> want;  // seq -> config key
  for (const BestConfig& b : *best) {
    for (int j = 0; j < kJobs; ++j) {
      if (b.problem_key.find("/q" + std::to_string(SeqOf(j)) + "/") != std::string::npos) want[SeqOf(j)] = b.config_key;
    }
  }
  ASSERT_EQ(want.size(), static_cast<size_t>(kJobs));
  for (int r = 0; r < kReplicas; ++r) {
    for (const auto& [seq, config] : want) {
      std::string got;
      WaitFor(
          [&] {
            CommandResult c = RunCommand({FUSETUNE_BINARY, "best", "--server", Address(r), "--token-file",
                                          token_file_, "--device-class", device_class_, "--seq", std::to_string(seq),
                                          "--heads", "1", "--head-dim", "32", "--json"},
                                         60);
            if (c.exit_code != 0) return false;
            const nlohmann::json answer = nlohmann::json::parse(c.out);
            got = answer.at("config").get<std::string>() + " " + answer.at("provenance").get<std::string>();
            return got == config + " exact";
          },
          60);
      EXPECT_EQ(got, config + " exact") << "replica " << r << ", seq " << seq;
    }
  }
  // FUSETUNE_FLEET_LOGS=1 prints what the workers and replicas said (what the kills did).
  if (std::getenv("FUSETUNE_FLEET_LOGS") != nullptr) {
    std::cerr << AllWorkerLogs();
    for (const auto& r : replicas_) std::cerr << r->Stderr();
  }
  for (int r = 0; r < kReplicas; ++r) {
    replicas_[r]->Signal(SIGTERM);
    EXPECT_EQ(replicas_[r]->Wait(30), 0) << replicas_[r]->Stderr();
  }
}

}  // namespace
}  // namespace fusetune::testing
