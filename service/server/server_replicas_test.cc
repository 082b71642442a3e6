// Several replicas of the service over one database (service/server/README.md, "Several
// replicas"): what one replica is told is seen by the others through the database alone. Each
// test runs two in-process Servers over one SQLite file and over one PostgreSQL database.
#include <atomic>
#include <chrono>
#include <thread>

#include "fusetune/service/server.h"
#include "server_test_util.h"
#include "testing/http_get.h"
#include "testing/store_backends.h"

namespace fusetune::testing {
namespace {

class ServerReplicas : public db_test::StoreBackendTest {
 protected:
  void SetUp() override {
    db_test::StoreBackendTest::SetUp();
    if (IsSkipped()) return;
    a_ = StartReplica("replica-a:{port}");
    b_ = StartReplica("replica-b");
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
    sa_ = Connect(a_->port());
    sb_ = Connect(b_->port());
  }

  std::unique_ptr<Server> StartReplica(const std::string& name) {
    ServerOptions options;
    options.db_path = Location();
    options.token = kToken;
    options.replica = name;
    // Only the shared-state poll can carry news between the replicas within a test: the full
    // refresh (and its lease expiry) is an hour away.
    options.refresh_ms = 3600000;
    options.replica_poll_ms = 50;
    // One long-poll at a time: a second is refused at once, which tells the test that the
    // first is waiting (WaitUntilLongPolling).
    options.max_concurrent_long_polls = 1;
    auto server = Server::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(*server) : nullptr;
  }

  // Submits a one-problem tune job through `s`; its id.
  int64_t Submit(const Stubs& s, int seq) {
    v1::SubmitTuningJobRequest req;
    req.set_device_class(kCpuClass);
    *req.add_problems() = SeedProblem(seq);
    v1::SubmitTuningJobResponse resp;
    grpc::Status st = s.tuning->SubmitTuningJob(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.job_id();
  }

  // Leases through `s`, long-polling up to wait_ms. A refusal for want of the one long-poll slot
  // is retried, as a worker retries it: WaitUntilLongPolling's probe holds that slot for the
  // moment of each of its polls, and on a loaded machine this call can arrive in one of them.
  v1::LeaseJobResponse Lease(const Stubs& s, const std::string& worker_id, int64_t wait_ms) {
    v1::LeaseJobRequest req;
    req.set_worker_id(worker_id);
    req.set_device_class(kCpuClass);
    req.set_wait_ms(wait_ms);
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);;) {
      v1::LeaseJobResponse resp;
      auto ctx = Ctx();
      ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(wait_ms + 30000));
      grpc::Status st = s.worker->LeaseJob(ctx.get(), req, &resp);
      if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        continue;
      }
      EXPECT_TRUE(st.ok()) << st.error_message();
      return resp;
    }
  }

  // Waits until a long-poll is waiting in `s`: a probe's LeaseJob is then refused for want of a
  // slot (the queue is empty, so a probe that does get the slot takes nothing).
  bool WaitUntilLongPolling(const Stubs& s) {
    if (!RegisterCpuWorker(s, "probe").ok()) return false;
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
         std::chrono::steady_clock::now() < until;) {
      v1::LeaseJobRequest req;
      req.set_worker_id("probe");
      req.set_wait_ms(0);
      v1::LeaseJobResponse resp;
      grpc::Status st = s.worker->LeaseJob(Ctx().get(), req, &resp);
      if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) return true;
      EXPECT_FALSE(resp.has_job());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  v1::GetBestConfigResponse Best(const Stubs& s, int seq) {
    v1::GetBestConfigRequest req;
    req.set_device_class(kCpuClass);
    *req.mutable_problem() = SeedProblem(seq);
    v1::GetBestConfigResponse resp;
    grpc::Status st = s.tuning->GetBestConfig(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }

  std::unique_ptr<Server> a_, b_;
  Stubs sa_, sb_;
};
FUSETUNE_STORE_BACKENDS(ServerReplicas);

// A worker registered through A long-polls B; a job submitted through A once that poll waits
// wakes it (B's wait is 25 s and its full refresh an hour away: only the shared-state poll can
// end it with a job). Its trials go
// to B, the retried upload of the same trials to A stores nothing twice, the completion goes to
// A, and B then serves the job's best config, the same answer as A's.
TEST_P(ServerReplicas, AJobSubmittedToOneReplicaIsLeasedCompletedAndServedThroughAnother) {
  ASSERT_TRUE(RegisterCpuWorker(sa_, "w1").ok());
  std::atomic<bool> leased{false};
  v1::LeaseJobResponse lease;
  std::thread poller([&] {
    lease = Lease(sb_, "w1", 25000);
    leased = true;
  });
  EXPECT_TRUE(WaitUntilLongPolling(sb_));
  const int64_t job_id = Submit(sa_, 128);
  poller.join();
  ASSERT_TRUE(leased);
  ASSERT_TRUE(lease.has_job()) << "B's long-poll was not woken by a job submitted through A";
  EXPECT_EQ(lease.job().job_id(), job_id);
  const int64_t run_id = lease.job().run_id();
  const std::string key = KeyOf(SeedProblem(128));

  const std::vector<v1::Trial> trials = {MakeTrial(run_id, key, "fused/bm64/bs64/t1/fp32/st1", 50.0),
                                         MakeTrial(run_id, key, "fused/bm32/bs64/t1/fp32/st1", 40.0)};
  v1::ReportTrialsResponse first;
  ASSERT_TRUE(Report(sb_, "w1", trials, &first).ok());
  EXPECT_EQ(first.inserted(), 2);
  v1::ReportTrialsResponse retried;  // the reply was lost; the worker fails over to A
  ASSERT_TRUE(Report(sa_, "w1", trials, &retried).ok());
  EXPECT_EQ(retried.received(), 2);
  EXPECT_EQ(retried.inserted(), 0);
  EXPECT_EQ(*a_->store()->CountTrials(run_id), 2);

  ASSERT_TRUE(CompleteJob(sa_, "w1", job_id).ok());
  EXPECT_EQ(GetJobOrFail(sb_, job_id).state(), "done");
  // A computed and stored the best config; B reloads it within its poll period.
  v1::GetBestConfigResponse from_a = Best(sa_, 128);
  EXPECT_EQ(from_a.provenance(), v1::GetBestConfigResponse::EXACT);
  EXPECT_EQ(from_a.config().key(), "fused/bm32/bs64/t1/fp32/st1");
  v1::GetBestConfigResponse from_b;
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
       std::chrono::steady_clock::now() < until;) {
    from_b = Best(sb_, 128);
    if (from_b.provenance() == v1::GetBestConfigResponse::EXACT) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(from_b.provenance(), v1::GetBestConfigResponse::EXACT);
  EXPECT_EQ(from_b.config().key(), from_a.config().key());
  EXPECT_EQ(from_b.median_us(), from_a.median_us());
}

// A lease taken through one replica is held through the other: its heartbeat renews it there,
// and a release through the other replica puts the job back for a worker polling the first.
TEST_P(ServerReplicas, ALeaseTakenThroughOneReplicaIsRenewedAndReleasedThroughTheOther) {
  ASSERT_TRUE(RegisterCpuWorker(sa_, "w1").ok());
  ASSERT_TRUE(RegisterCpuWorker(sb_, "w2").ok());
  const int64_t job_id = Submit(sa_, 256);
  v1::LeaseJobResponse lease = Lease(sa_, "w1", 1000);
  ASSERT_TRUE(lease.has_job());
  v1::HeartbeatRequest beat;
  beat.set_worker_id("w1");
  beat.set_job_id(job_id);
  beat.set_lease_token(lease.job().lease_token());
  v1::HeartbeatResponse beat_resp;
  ASSERT_TRUE(sb_.worker->Heartbeat(Ctx().get(), beat, &beat_resp).ok());
  EXPECT_TRUE(beat_resp.lease_valid());

  std::atomic<bool> done{false};
  v1::LeaseJobResponse second;
  std::thread poller([&] {
    second = Lease(sa_, "w2", 25000);
    done = true;
  });
  EXPECT_TRUE(WaitUntilLongPolling(sa_));
  v1::ReleaseJobRequest release;
  release.set_worker_id("w1");
  release.set_job_id(job_id);
  release.set_lease_token(lease.job().lease_token());
  v1::ReleaseJobResponse release_resp;
  EXPECT_TRUE(sb_.worker->ReleaseJob(Ctx().get(), release, &release_resp).ok());
  poller.join();
  ASSERT_TRUE(second.has_job()) << "the release through B did not wake A's long-poll";
  EXPECT_EQ(second.job().job_id(), job_id);
  EXPECT_GT(second.job().lease_token(), lease.job().lease_token());
}

// Every series of each replica's /metrics names the replica; "{port}" becomes the bound port.
TEST_P(ServerReplicas, EverySeriesCarriesItsReplicaLabel) {
  auto page = HttpGet(a_->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  const std::string label = "replica=\"replica-a:" + std::to_string(a_->port()) + "\"";
  int series = 0;
  size_t at = 0;
  while (at < page->body.size()) {
    size_t end = page->body.find('\n', at);
    if (end == std::string::npos) end = page->body.size();
    const std::string line = page->body.substr(at, end - at);
    at = end + 1;
    if (line.empty() || line[0] == '#') continue;
    ++series;
    EXPECT_NE(line.find(label), std::string::npos) << line;
  }
  EXPECT_GT(series, 50);
  auto other = HttpGet(b_->metrics_port(), "/metrics");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(other->body.find("fusetune_jobs{state=\"queued\",replica=\"replica-b\"}"), std::string::npos)
      << other->body.substr(0, 2000);
}

}  // namespace
}  // namespace fusetune::testing
