// LeaseJob long-polls whose caller is gone (cancelled, past its deadline) must not keep a
// job: a live worker leases it at once, not after the (60 s) lease expires. Real gRPC calls
// on 127.0.0.1; every wait is on an event with a generous bound.
#include <atomic>
#include <chrono>
#include <thread>

#include "fusetune/wire/connection.h"
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
    AddBearerToken(*ctx, kToken);
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

// Submit and cancel race. When the cancel crosses the reply, the call can end differently on
// the two sides: the server may take the job back although the reply arrived (the ghost's
// completion is then refused), or keep it for the ghost although the reply was dropped after it
// left the server (no server can see that; the lease expiry covers it). In every round the job
// is held by exactly one of them or free for a live worker at once: never lost, never held twice.
TEST_F(LeaseDeliveryTest, AJobIsNeitherLostNorHeldTwiceWhenACancelCrossesTheReply) {
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
    const bool received = ghost_status.ok() && ghost_resp.leased();
    if (received) ASSERT_EQ(ghost_resp.job().job_id(), job_id.load());
    // The ghost holds it (received, or kept for it after a dropped reply): its completion stands.
    if ((received || LeasedBy(job_id) == "ghost") && CompleteJob(stubs_, "ghost", job_id).ok()) continue;
    // Otherwise the server took it back: a live worker leases it at once, not after the lease.
    const int64_t leased = LiveLease();
    ASSERT_EQ(leased, job_id.load()) << "job " << job_id << " is held by '" << LeasedBy(job_id)
                                     << "' although the ghost could not complete it (its call: "
                                     << (received ? "received" : ghost_status.error_message()) << ")";
    Complete("live", job_id);
  }
}

}  // namespace
}  // namespace fusetune::testing
