// LeaseJob long-polls whose caller is gone (cancelled, past its deadline) must not keep a
// job: a live worker leases it at once, not after the (60 s) lease expires. Real gRPC calls
// on 127.0.0.1; every wait is on an event with a generous bound.
#include <atomic>
#include <chrono>
#include <thread>

#include "fusetune/service/server.h"
#include "server_test_util.h"

namespace fusetune::testing {
namespace {

constexpr int64_t kLeaseMs = 60000;     // far longer than any bound below
constexpr int kLiveWaitMs = 20000;      // the live worker's long-poll: a third of the lease

class LeaseDeliveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.metrics_address.clear();
    options.db_path = dir_.File("fusetune.db");
    options.token = kToken;
    options.lease_ms = kLeaseMs;
    options.refresh_ms = 100;
    auto server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stubs_ = Connect(server_->port());
    Register("ghost");
    Register("live");
  }

  void Register(const std::string& worker_id) {
    grpc::Status s = RegisterCpuWorker(stubs_, worker_id);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  int64_t Submit() {
    v1::SubmitTuningJobRequest req;
    *req.add_problems() = SeedProblem(128);
    req.set_device_class(kCpuClass);
    req.set_max_trials(1);
    v1::SubmitTuningJobResponse resp;
    grpc::Status s = stubs_.tuning->SubmitTuningJob(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job_id();
  }

  grpc::Status LeaseOn(grpc::ClientContext* ctx, const std::string& worker_id, int wait_ms,
                       v1::LeaseJobResponse* resp) {
    ctx->AddMetadata("authorization", std::string("Bearer ") + kToken);
    v1::LeaseJobRequest req;
    req.set_worker_id(worker_id);
    req.set_wait_ms(wait_ms);
    return stubs_.worker->LeaseJob(ctx, req, resp);
  }

  // The live worker long-polls; returns the job it leased (0 = none within kLiveWaitMs).
  int64_t LiveLease() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(kLiveWaitMs + 10000));
    v1::LeaseJobResponse resp;
    grpc::Status s = LeaseOn(&ctx, "live", kLiveWaitMs, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.leased() ? resp.job().job_id() : 0;
  }

  std::string LeasedBy(int64_t job_id) { return GetJobOrFail(stubs_, job_id).leased_by(); }

  void Complete(const std::string& worker_id, int64_t job_id) {
    grpc::Status s = CompleteJob(stubs_, worker_id, job_id);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }

  ScratchDir dir_;
  std::unique_ptr<Server> server_;
  Stubs stubs_;
};

TEST_F(LeaseDeliveryTest, CancelledLongPollTakesNoJobAndALiveWorkerLeasesItAtOnce) {
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    grpc::ClientContext ghost_ctx;
    ghost_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    grpc::Status ghost_status;
    v1::LeaseJobResponse ghost_resp;
    std::thread ghost([&] { ghost_status = LeaseOn(&ghost_ctx, "ghost", 30000, &ghost_resp); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the poll reaches the server
    ghost_ctx.TryCancel();
    const int64_t job_id = Submit();  // right after the cancel: wakes any poll still waiting
    ghost.join();
    EXPECT_EQ(ghost_status.error_code(), grpc::StatusCode::CANCELLED) << ghost_status.error_message();

    const int64_t leased = LiveLease();
    ASSERT_EQ(leased, job_id) << "job " << job_id << " is held by '" << LeasedBy(job_id)
                              << "' (a cancelled poll) until its " << kLeaseMs << " ms lease expires";
    Complete("live", job_id);
  }
}

TEST_F(LeaseDeliveryTest, LongPollPastItsCallersDeadlineTakesNoJob) {
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    grpc::ClientContext ghost_ctx;
    ghost_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    v1::LeaseJobResponse ghost_resp;
    // The request asks to wait 30 s but the caller gives up after 0.5 s.
    grpc::Status ghost_status = LeaseOn(&ghost_ctx, "ghost", 30000, &ghost_resp);
    // The server ends the wait at the caller's deadline too: whichever side's timer fires
    // first, the caller got no job.
    EXPECT_TRUE(ghost_status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                (ghost_status.ok() && !ghost_resp.leased()))
        << "code " << ghost_status.error_code() << ": "
        << ghost_status.error_message();
    const int64_t job_id = Submit();

    const int64_t leased = LiveLease();
    ASSERT_EQ(leased, job_id) << "job " << job_id << " is held by '" << LeasedBy(job_id)
                              << "' (a poll past its deadline) until its " << kLeaseMs << " ms lease expires";
    Complete("live", job_id);
  }
}

// Submit and cancel race: whichever way each round goes, the job is delivered to the ghost
// (which then holds it legitimately), or leasable by the live worker at once, or, when the
// reply left the server just before the cancel, delivered again by the ghost's next poll;
// never kept from both until its lease expires.
TEST_F(LeaseDeliveryTest, AJobIsNeverHeldByACallerThatDidNotReceiveIt) {
  for (int round = 0; round < 10; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    grpc::ClientContext ghost_ctx;
    ghost_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    grpc::Status ghost_status;
    v1::LeaseJobResponse ghost_resp;
    std::thread ghost([&] { ghost_status = LeaseOn(&ghost_ctx, "ghost", 30000, &ghost_resp); });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::atomic<int64_t> job_id{0};
    std::thread submitter([&] { job_id = Submit(); });
    std::this_thread::sleep_for(std::chrono::microseconds(500 * (round % 4)));
    ghost_ctx.TryCancel();
    submitter.join();
    ghost.join();
    if (ghost_status.ok() && ghost_resp.leased()) {
      ASSERT_EQ(ghost_resp.job().job_id(), job_id.load());
      EXPECT_EQ(LeasedBy(job_id), "ghost");
      Complete("ghost", job_id);
      continue;
    }
    if (LeasedBy(job_id) == "ghost") {
      // The reply left the server before the cancel reached it (the client dropped it): no
      // server can tell. The ghost's next poll gets the same job at once, not after the lease.
      grpc::ClientContext again_ctx;
      again_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(kLiveWaitMs + 10000));
      v1::LeaseJobResponse again;
      grpc::Status s = LeaseOn(&again_ctx, "ghost", kLiveWaitMs, &again);
      ASSERT_TRUE(s.ok()) << s.error_message();
      ASSERT_TRUE(again.leased()) << "job " << job_id << " is held by 'ghost', whose next poll got nothing";
      EXPECT_EQ(again.job().job_id(), job_id.load());
      Complete("ghost", job_id);
      continue;
    }
    const int64_t leased = LiveLease();
    ASSERT_EQ(leased, job_id.load()) << "job " << job_id << " is held by '" << LeasedBy(job_id)
                                     << "' although its reply was not delivered (" << ghost_status.error_message()
                                     << ")";
    Complete("live", job_id);
  }
}

}  // namespace
}  // namespace fusetune::testing
