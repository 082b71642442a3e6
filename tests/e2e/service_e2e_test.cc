// End-to-end tests of the tuning service with real processes: `fusetune serve` over a real
// SQLite file, real `fusetune worker` daemons on CPU devices, real gRPC on 127.0.0.1 with
// ephemeral ports. No mocks.
#include <signal.h>

#include <map>
#include <set>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "e2e_harness.h"
#include "fusetune/client/config_cache.h"

namespace fusetune::e2e {
namespace {

using testing::TempDir;

std::string Dump(ServerProcess& server, std::vector<WorkerProcess*> workers) {
  std::string out = "---- server log ----\n" + server.Logs();
  for (WorkerProcess* w : workers) out += "\n---- worker log ----\n" + w->Logs();
  return out;
}

// The checks every test ends with, on one finished job: done, its trials unique per
// (problem, config, attempt) and by id, and every trial any worker spooled is stored.
void ExpectJobStoredExactlyOnce(const std::string& db, int64_t job_id, const std::vector<WorkerProcess*>& workers,
                                size_t expected_trials) {
  auto store = Store::Open(db);
  ASSERT_TRUE(store.ok()) << store.status();
  auto job = (*store)->GetJob(job_id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state, JobState::kDone);
  ASSERT_GT(job->run_id, 0);
  auto trials = (*store)->ListTrials(job->run_id);
  ASSERT_TRUE(trials.ok()) << trials.status();
  std::set<std::string> ids;
  std::map<std::tuple<std::string, std::string, int, TrialStage>, int> per_cell;
  size_t screen = 0;
  for (const Trial& t : *trials) {
    ids.insert(t.trial_id);
    ++per_cell[{t.problem_key, t.config_key, t.attempt, t.stage}];
    screen += t.stage == TrialStage::kScreen;
  }
  EXPECT_EQ(ids.size(), trials->size()) << "a trial id is stored twice";
  for (const auto& [cell, n] : per_cell) {
    EXPECT_EQ(n, 1) << std::get<0>(cell) << " " << std::get<1>(cell) << " attempt " << std::get<2>(cell);
  }
  EXPECT_EQ(screen, expected_trials) << "screen trials (the final rounds come on top)";
  size_t spooled = 0;
  for (WorkerProcess* w : workers) {
    for (const std::string& id : SpooledTrialIds(w->spool_dir(), job->run_id)) {
      ++spooled;
      EXPECT_TRUE(ids.contains(id)) << "trial " << id << " measured by a worker is missing from the database";
    }
  }
  EXPECT_GT(spooled, 0u);
}

// Screen trials a job will have: every variant gets max_trials configs (the CPU space of
// these problems is larger than that); the final rounds' trials come on top.
constexpr int kMaxTrials = 3;

TEST(ServiceEndToEnd, TwoCpuWorkersTuneJobsAndGetBestConfigMatchesTheDatabase) {
  TempDir dir;
  WriteToken(dir);
  ServerProcess server(dir, {.lease_ms = 10000});
  ASSERT_TRUE(server.Start()) << server.Logs();
  const std::string device_class = CpuDeviceClass();
  ASSERT_FALSE(device_class.empty());

  WorkerProcess a(dir, server.address(), "wa", {});
  WorkerProcess b(dir, server.address(), "wb", {});
  Client client(server.address());
  const std::vector<AttentionProblem> problems1 = {SmallProblem(64), SmallProblem(96, true)};
  const std::vector<AttentionProblem> problems2 = {SmallProblem(80)};
  const int64_t job1 = client.Submit(problems1, device_class, kMaxTrials);
  const int64_t job2 = client.Submit(problems2, device_class, kMaxTrials);
  ASSERT_GT(job1, 0);
  ASSERT_GT(job2, 0);

  ASSERT_TRUE(WaitFor([&] { return client.GetJob(job1).state() == "done" && client.GetJob(job2).state() == "done"; },
                      50))
      << Dump(server, {&a, &b});

  // Both workers registered (their one CPU device each).
  auto store = Store::Open(server.db());
  ASSERT_TRUE(store.ok());
  auto workers = (*store)->ListWorkers();
  ASSERT_TRUE(workers.ok());
  std::set<std::string> worker_ids;
  for (const WorkerRecord& w : *workers) worker_ids.insert(w.worker_id);
  EXPECT_TRUE(worker_ids.contains("wa-d0")) << Dump(server, {&a, &b});
  EXPECT_TRUE(worker_ids.contains("wb-d0"));

  // GetBestConfig answers exactly what the database holds.
  std::vector<AttentionProblem> all = problems1;
  all.insert(all.end(), problems2.begin(), problems2.end());
  for (const AttentionProblem& p : all) {
    auto stored = (*store)->GetBestConfig(device_class, p.Key());
    ASSERT_TRUE(stored.ok()) << p.Key() << ": " << stored.status();
    v1::GetBestConfigResponse answer;
    grpc::Status st = client.GetBestConfig(p, device_class, &answer);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(answer.provenance(), v1::GetBestConfigResponse::EXACT);
    EXPECT_EQ(answer.config().key(), stored->config_key);
    EXPECT_DOUBLE_EQ(answer.median_us(), stored->median_us);
    EXPECT_EQ(answer.run_id(), stored->run_id);
    EXPECT_EQ(answer.problem_key(), p.Key());
  }
  // The client cache over the real service: a miss answers the default at once, the
  // background fetch brings the database's answer, and once the service is gone the cache
  // keeps serving it (and defaults for new problems) without waiting on the network.
  {
    GrpcFetcherOptions fetch;
    fetch.target = server.address();
    fetch.device_class = device_class;
    fetch.token = kToken;
    ConfigCacheOptions cache_options;
    cache_options.retry_initial = absl::Milliseconds(50);
    auto cache = ConfigCache::Connect(fetch, cache_options);
    const AttentionProblem& p = problems1[0];
    EXPECT_EQ(cache->Lookup(p).provenance, ConfigProvenance::kFallback);
    ASSERT_TRUE(cache->Flush(absl::Seconds(10)));
    auto stored = (*store)->GetBestConfig(device_class, p.Key());
    ASSERT_TRUE(stored.ok());
    CachedConfig hit = cache->Lookup(p);
    EXPECT_EQ(hit.provenance, ConfigProvenance::kExact);
    EXPECT_EQ(hit.config.Key(), stored->config_key);
    server.Kill();
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(cache->Lookup(p).config.Key(), stored->config_key);
    EXPECT_EQ(cache->Lookup(SmallProblem(200)).provenance, ConfigProvenance::kFallback);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50));
    EXPECT_FALSE(cache->Flush(absl::Milliseconds(500)));  // the new problem cannot be fetched
    EXPECT_EQ(cache->Lookup(p).config.Key(), stored->config_key);
    ASSERT_TRUE(server.Restart()) << server.Logs();
  }
  ExpectJobStoredExactlyOnce(server.db(), job1, {&a, &b}, problems1.size() * 2 * kMaxTrials);
  ExpectJobStoredExactlyOnce(server.db(), job2, {&a, &b}, problems2.size() * 2 * kMaxTrials);

  // SIGTERM: idle workers exit 0 promptly.
  a.process().Signal(SIGTERM);
  b.process().Signal(SIGTERM);
  EXPECT_EQ(a.process().Wait(15), std::optional<int>(0)) << a.Logs();
  EXPECT_EQ(b.process().Wait(15), std::optional<int>(0)) << b.Logs();
}

TEST(ServiceFaults, KilledWorkersJobIsFinishedByAnotherAfterTheLeaseExpires) {
  TempDir dir;
  WriteToken(dir);
  ServerProcess server(dir, {.lease_ms = 2000, .heartbeat_ms = 300, .refresh_ms = 200});
  ASSERT_TRUE(server.Start()) << server.Logs();
  const std::string device_class = CpuDeviceClass();
  Client client(server.address());
  const int max_trials = 6;
  const int64_t job = client.Submit({SmallProblem(64)}, device_class, max_trials);
  ASSERT_GT(job, 0);

  // Worker A measures slowly; kill it once a few of its trials are on the server.
  WorkerProcess a(dir, server.address(), "wa", {"--testing-trial-delay-ms", "250"});
  ASSERT_TRUE(WaitFor([&] { return client.GetJob(job).trials_recorded() >= 3; }, 30)) << Dump(server, {&a});
  a.process().Signal(SIGKILL);
  a.process().Wait(10);
  const v1::Job after_kill = client.GetJob(job);
  EXPECT_EQ(after_kill.state(), "leased");
  EXPECT_LT(after_kill.trials_recorded(), 2 * max_trials) << "A finished before it was killed";

  // Worker B gets the job once A's lease lapses and finishes it, reusing A's trials.
  WorkerProcess b(dir, server.address(), "wb", {});
  ASSERT_TRUE(WaitFor([&] { return client.GetJob(job).state() == "done"; }, 40)) << Dump(server, {&a, &b});
  const v1::Job done = client.GetJob(job);
  EXPECT_GE(done.attempts(), 2);
  ExpectJobStoredExactlyOnce(server.db(), job, {&a, &b}, 2 * max_trials);
  // Completed exactly once, by B.
  EXPECT_EQ(b.Logs().find("job " + std::to_string(job) + " completed") != std::string::npos, true) << b.Logs();
  EXPECT_EQ(a.Logs().find("completed"), std::string::npos);
  EXPECT_NE(b.Logs().find("resumed"), std::string::npos);
  b.process().Signal(SIGTERM);
  EXPECT_EQ(b.process().Wait(15), std::optional<int>(0)) << b.Logs();
}

TEST(ServiceFaults, ServerKilledMidUploadAndRestartedGetsTheWorkersSpool) {
  TempDir dir;
  WriteToken(dir);
  ServerProcess server(dir, {.lease_ms = 15000, .heartbeat_ms = 300, .refresh_ms = 200});
  ASSERT_TRUE(server.Start()) << server.Logs();
  const std::string device_class = CpuDeviceClass();
  const int max_trials = 6;
  int64_t job = 0;
  {
    Client client(server.address());
    job = client.Submit({SmallProblem(64)}, device_class, max_trials);
    ASSERT_GT(job, 0);
  }
  WorkerProcess w(dir, server.address(), "ww", {"--testing-trial-delay-ms", "300"});
  {
    Client client(server.address());
    ASSERT_TRUE(WaitFor([&] { return client.GetJob(job).trials_recorded() >= 2; }, 30)) << Dump(server, {&w});
  }
  server.Kill();  // mid-upload: the worker uploads after every trial

  // The worker keeps measuring into its spool while the service is gone.
  auto spooled_now = [&] {
    auto store = Store::Open(server.db());
    auto j = store.ok() ? (*store)->GetJob(job) : absl::StatusOr<Job>(absl::NotFoundError(""));
    return j.ok() ? SpooledTrialIds(w.spool_dir(), j->run_id).size() : 0u;
  };
  const size_t before = spooled_now();
  ASSERT_TRUE(WaitFor([&] { return spooled_now() >= before + 2; }, 20)) << w.Logs();

  ASSERT_TRUE(server.Restart()) << server.Logs();
  Client client(server.address());
  ASSERT_TRUE(WaitFor([&] { return client.GetJob(job).state() == "done"; }, 40)) << Dump(server, {&w});
  EXPECT_EQ(client.GetJob(job).attempts(), 1);  // the lease outlived the outage: no re-run
  ExpectJobStoredExactlyOnce(server.db(), job, {&w}, 2 * max_trials);
  EXPECT_NE(w.Logs().find("upload failed"), std::string::npos) << w.Logs();
  w.process().Signal(SIGTERM);
  EXPECT_EQ(w.process().Wait(15), std::optional<int>(0)) << w.Logs();
}

TEST(ServiceFaults, WorkerRestartedAfterACrashUploadsItsSpoolFirst) {
  TempDir dir;
  WriteToken(dir);
  ServerProcess server(dir, {.lease_ms = 3000, .heartbeat_ms = 300, .refresh_ms = 200});
  ASSERT_TRUE(server.Start()) << server.Logs();
  const std::string device_class = CpuDeviceClass();
  const int max_trials = 6;
  int64_t job = 0;
  {
    Client client(server.address());
    job = client.Submit({SmallProblem(64)}, device_class, max_trials);
    ASSERT_GT(job, 0);
  }
  auto first = std::make_unique<WorkerProcess>(dir, server.address(), "wr",
                                               std::vector<std::string>{"--testing-trial-delay-ms", "250"});
  {
    Client client(server.address());
    ASSERT_TRUE(WaitFor([&] { return client.GetJob(job).trials_recorded() >= 1; }, 30)) << first->Logs();
  }
  // Cut the service off, let trials pile up in the spool only, then crash the worker.
  server.Kill();
  auto store = Store::Open(server.db());
  ASSERT_TRUE(store.ok());
  const int64_t run_id = (*store)->GetJob(job)->run_id;
  store->reset();
  const size_t before = SpooledTrialIds(first->spool_dir(), run_id).size();
  ASSERT_TRUE(WaitFor([&] { return SpooledTrialIds(first->spool_dir(), run_id).size() >= before + 2; }, 20));
  first->process().Signal(SIGKILL);
  first->process().Wait(10);
  const std::set<std::string> crashed_spool = SpooledTrialIds(first->spool_dir(), run_id);

  // Same worker id, same spool: it uploads what the crash left before anything else.
  ASSERT_TRUE(server.Restart()) << server.Logs();
  WorkerProcess second(dir, server.address(), "wr", {"--max-jobs", "1"});
  EXPECT_EQ(second.process().Wait(40), std::optional<int>(0)) << Dump(server, {first.get(), &second});
  EXPECT_NE(second.Logs().find("from before; uploading them first"), std::string::npos) << second.Logs();
  Client client(server.address());
  EXPECT_EQ(client.GetJob(job).state(), "done");
  ExpectJobStoredExactlyOnce(server.db(), job, {&second}, 2 * max_trials);
  auto after = Store::Open(server.db());
  ASSERT_TRUE(after.ok());
  for (const std::string& id : crashed_spool) {
    EXPECT_TRUE(*(*after)->HasTrial(id)) << "spooled before the crash, never uploaded: " << id;
  }
}

TEST(ServiceFaults, SigtermMidJobReleasesItAndTheNextWorkerResumes) {
  TempDir dir;
  WriteToken(dir);
  ServerProcess server(dir, {.lease_ms = 30000});
  ASSERT_TRUE(server.Start()) << server.Logs();
  const std::string device_class = CpuDeviceClass();
  Client client(server.address());
  const int max_trials = 6;
  const int64_t job = client.Submit({SmallProblem(64)}, device_class, max_trials);
  WorkerProcess a(dir, server.address(), "wa", {"--testing-trial-delay-ms", "250"});
  ASSERT_TRUE(WaitFor([&] { return client.GetJob(job).trials_recorded() >= 2; }, 30)) << Dump(server, {&a});
  a.process().Signal(SIGTERM);
  EXPECT_EQ(a.process().Wait(20), std::optional<int>(0)) << a.Logs();
  // Released at once (not after the 30 s lease), with its trials kept.
  const v1::Job released = client.GetJob(job);
  EXPECT_EQ(released.state(), "queued") << a.Logs();
  EXPECT_GE(released.trials_recorded(), 2);
  WorkerProcess b(dir, server.address(), "wb", {"--max-jobs", "1"});
  EXPECT_EQ(b.process().Wait(40), std::optional<int>(0)) << Dump(server, {&a, &b});
  EXPECT_EQ(client.GetJob(job).state(), "done");
  ExpectJobStoredExactlyOnce(server.db(), job, {&a, &b}, 2 * max_trials);
}

TEST(ServiceMultiDevice, OneWorkerRunsTwoJobsAtOnceOnTwoCpuDevices) {
  TempDir dir;
  WriteToken(dir);
  ServerProcess server(dir, {.lease_ms = 10000});
  ASSERT_TRUE(server.Start()) << server.Logs();
  const std::string device_class = CpuDeviceClass();
  Client client(server.address());
  const int max_trials = 4;
  const int64_t job1 = client.Submit({SmallProblem(64)}, device_class, max_trials);
  const int64_t job2 = client.Submit({SmallProblem(72)}, device_class, max_trials);
  WorkerProcess w(dir, server.address(), "wm",
                  {"--cpu-devices", "2", "--max-jobs", "2", "--testing-trial-delay-ms", "200"});
  // Both jobs leased at the same time, one per device.
  std::set<std::string> holders;
  ASSERT_TRUE(WaitFor(
      [&] {
        v1::Job j1 = client.GetJob(job1), j2 = client.GetJob(job2);
        if (j1.state() != "leased" || j2.state() != "leased") return false;
        holders = {j1.leased_by(), j2.leased_by()};
        return true;
      },
      30))
      << Dump(server, {&w});
  EXPECT_EQ(holders, (std::set<std::string>{"wm-d0", "wm-d1"}));
  // --max-jobs 2: the daemon exits 0 by itself once both are done.
  EXPECT_EQ(w.process().Wait(40), std::optional<int>(0)) << Dump(server, {&w});
  EXPECT_EQ(client.GetJob(job1).state(), "done");
  EXPECT_EQ(client.GetJob(job2).state(), "done");
  ExpectJobStoredExactlyOnce(server.db(), job1, {&w}, 2 * max_trials);
  ExpectJobStoredExactlyOnce(server.db(), job2, {&w}, 2 * max_trials);
}

}  // namespace
}  // namespace fusetune::e2e
