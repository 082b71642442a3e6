// Conventions of fusetune.proto a third-party client relies on, through real gRPC: the
// machine-readable error reasons, the trial id formula (and the server deriving it), the
// health service's named services, and ListWorkers.
#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "fusetune/db/store.h"
#include "fusetune/service/server.h"
#include "grpcpp/generic/generic_stub.h"
#include "server_test_util.h"

namespace fusetune::testing {
namespace {

constexpr char kConfig[] = "fused/bm64/bs64/t1/fp32/st1";

class ServerProtocolTest : public ::testing::Test {
 protected:
  void StartServer(ServerOptions options = {}) {
    options.metrics_address.clear();
    options.db_path = dir_.File("fusetune.db");
    options.token = kToken;
    options.refresh_ms = 100;
    auto server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stubs_ = Connect(server_->port());
  }

  void Register(const std::string& worker_id, const std::string& host = "test-host") {
    grpc::Status s = RegisterCpuWorker(stubs_, worker_id, host);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  int64_t Submit(int seq_len = 128) {
    v1::SubmitTuningJobRequest req;
    *req.add_problems() = SeedProblem(seq_len);
    req.set_device_class(kCpuClass);
    v1::SubmitTuningJobResponse resp;
    grpc::Status s = stubs_.tuning->SubmitTuningJob(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job_id();
  }

  v1::LeaseJobResponse Lease(const std::string& worker_id) {
    v1::LeaseJobRequest req;
    req.set_worker_id(worker_id);
    v1::LeaseJobResponse resp;
    grpc::Status s = stubs_.worker->LeaseJob(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  ScratchDir dir_;
  std::unique_ptr<Server> server_;
  Stubs stubs_;
};

std::string ReasonOf(const grpc::ClientContext& ctx) {
  const auto& trailers = ctx.GetServerTrailingMetadata();
  auto it = trailers.find(kErrorReasonMetadata);
  return it == trailers.end() ? "" : std::string(it->second.data(), it->second.size());
}

// ---------------------------------------------------------------- error reasons

TEST_F(ServerProtocolTest, UnregisteredWorkerCallsCarryTheWorkerNotRegisteredReason) {
  StartServer();
  {
    auto ctx = Ctx();
    v1::LeaseJobRequest req;
    req.set_worker_id("stranger");
    v1::LeaseJobResponse resp;
    grpc::Status s = stubs_.worker->LeaseJob(ctx.get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
    EXPECT_EQ(ReasonOf(*ctx), kReasonWorkerNotRegistered);
    // The client library's conversion keeps the reason.
    EXPECT_EQ(ErrorReason(FromGrpcCall(s, *ctx)), kReasonWorkerNotRegistered);
  }
  {
    auto ctx = Ctx();
    v1::HeartbeatRequest req;
    req.set_worker_id("stranger");
    v1::HeartbeatResponse resp;
    grpc::Status s = stubs_.worker->Heartbeat(ctx.get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
    EXPECT_EQ(ReasonOf(*ctx), kReasonWorkerNotRegistered);
  }
  {
    auto ctx = Ctx(kToken, "stranger");
    v1::ReportTrialsResponse resp;
    auto writer = stubs_.worker->ReportTrials(ctx.get(), &resp);
    writer->Write(MakeTrial(1, KeyOf(SeedProblem(128)), kConfig, 10));
    writer->WritesDone();
    grpc::Status s = writer->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
    EXPECT_EQ(ReasonOf(*ctx), kReasonWorkerNotRegistered);
  }
}

TEST_F(ServerProtocolTest, OtherFailedPreconditionsCarryNoReason) {
  StartServer();
  Register("w1");
  // A registered worker uploading to a run it does not hold: FAILED_PRECONDITION, no reason.
  auto ctx = Ctx(kToken, "w1");
  v1::ReportTrialsResponse resp;
  auto writer = stubs_.worker->ReportTrials(ctx.get(), &resp);
  writer->Write(MakeTrial(12345, KeyOf(SeedProblem(128)), kConfig, 10));
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_EQ(ReasonOf(*ctx), "");
  EXPECT_EQ(ErrorReason(FromGrpcCall(s, *ctx)), "");
}

// ---------------------------------------------------------------- trial ids

TEST(TrialIdFormula, MatchesTheExampleDocumentedInTheProto) {
  EXPECT_EQ(TrialId(7, "prefill/b1/hq12/hkv12/q128/k128/d64/causal0/fp32", "fused/bm64/bs32/t4/fp32/st2", 0),
            "51ab53891e98a9bba789beab914d2b6d");
}

TEST_F(ServerProtocolTest, TrialWithoutIdIsStoredUnderTheFormulaIdAndAWrongIdIsRefused) {
  StartServer();
  Register("w1");
  Submit();
  v1::LeaseJobResponse lease = Lease("w1");
  ASSERT_TRUE(lease.leased());
  const int64_t run = lease.job().run_id();
  const std::string key = KeyOf(SeedProblem(128));

  v1::Trial anonymous = MakeTrial(run, key, kConfig, 10, /*attempt=*/2);
  anonymous.clear_trial_id();
  v1::ReportTrialsResponse first;
  grpc::Status s = Report(stubs_, "w1", {anonymous}, &first);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(first.inserted(), 1);
  auto stored = server_->store()->ListTrials(run);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].trial_id, TrialId(run, key, kConfig, 2));

  // Idempotent across the two spellings: the same trial with its id, and again without.
  v1::ReportTrialsResponse again;
  ASSERT_TRUE(Report(stubs_, "w1", {MakeTrial(run, key, kConfig, 10, 2), anonymous}, &again).ok());
  EXPECT_EQ(again.received(), 2);
  EXPECT_EQ(again.inserted(), 0);

  v1::Trial wrong = MakeTrial(run, key, kConfig, 10, 3);
  wrong.set_trial_id("0123456789abcdef0123456789abcdef");
  v1::ReportTrialsResponse refused;
  s = Report(stubs_, "w1", {wrong}, &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find(TrialId(run, key, kConfig, 3)), std::string::npos) << s.error_message();
  EXPECT_EQ(server_->store()->ListTrials(run)->size(), 1u);
}

// ---------------------------------------------------------------- health

// grpc.health.v1 over the generic stub (the health proto is not shipped to compile against):
// HealthCheckRequest{service = 1: string}, HealthCheckResponse{status = 1: enum}.
constexpr int kServing = 1;
constexpr int kNotServing = 2;

grpc::ByteBuffer HealthRequest(const std::string& service) {
  std::string bytes;
  if (!service.empty()) {
    bytes.push_back(0x0a);
    bytes.push_back(static_cast<char>(service.size()));  // names here are < 128 bytes
    bytes += service;
  }
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

int HealthStatusOf(const grpc::ByteBuffer& response) {
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return -1;
  std::string bytes;
  for (auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  if (bytes.empty()) return 0;  // UNKNOWN (the default) is encoded as nothing
  return bytes.size() == 2 && bytes[0] == 0x08 ? bytes[1] : -1;
}

// Health/Check; returns the serving status, or -(gRPC code) when the call failed.
int HealthCheck(const std::shared_ptr<grpc::Channel>& channel, const std::string& service) {
  grpc::GenericStub generic(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::ByteBuffer request = HealthRequest(service), response;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) {
                      std::lock_guard<std::mutex> lock(mu);
                      status = s;
                      done = true;
                      cv.notify_all();
                    });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return status.ok() ? HealthStatusOf(response) : -static_cast<int>(status.error_code());
}

// Health/Watch of one service: collects every status the server streams.
class HealthWatch final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  HealthWatch(const std::shared_ptr<grpc::Channel>& channel, const std::string& service)
      : generic_(channel), request_(HealthRequest(service)) {
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    generic_.PrepareBidiStreamingCall(&ctx_, "/grpc.health.v1.Health/Watch", grpc::StubOptions(), this);
    StartWriteLast(&request_, grpc::WriteOptions());
    StartRead(&response_);
    StartCall();
  }
  ~HealthWatch() override {
    ctx_.TryCancel();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
  }

  // Waits (up to 30 s) until the stream has delivered `status`.
  bool WaitFor(int status) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] {
      return std::find(seen_.begin(), seen_.end(), status) != seen_.end();
    });
  }

  void OnWriteDone(bool) override {}
  void OnReadDone(bool ok) override {
    if (!ok) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen_.push_back(HealthStatusOf(response_));
      cv_.notify_all();
    }
    StartRead(&response_);
  }
  void OnDone(const grpc::Status&) override {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }

 private:
  grpc::GenericStub generic_;
  grpc::ClientContext ctx_;
  grpc::ByteBuffer request_, response_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> seen_;
  bool done_ = false;
};

TEST_F(ServerProtocolTest, HealthAnswersForEachNamedServiceAndTurnsNotServingOnShutdown) {
  StartServer();
  EXPECT_EQ(HealthCheck(stubs_.channel, ""), kServing);
  EXPECT_EQ(HealthCheck(stubs_.channel, "fusetune.v1.TuningService"), kServing);
  EXPECT_EQ(HealthCheck(stubs_.channel, "fusetune.v1.WorkerService"), kServing);
  EXPECT_EQ(HealthCheck(stubs_.channel, "fusetune.v1.NoSuchService"), -static_cast<int>(grpc::StatusCode::NOT_FOUND));

  HealthWatch tuning(stubs_.channel, "fusetune.v1.TuningService");
  HealthWatch worker(stubs_.channel, "fusetune.v1.WorkerService");
  ASSERT_TRUE(tuning.WaitFor(kServing));
  ASSERT_TRUE(worker.WaitFor(kServing));
  std::thread stopper([&] { server_->Shutdown(); });
  EXPECT_TRUE(tuning.WaitFor(kNotServing));
  EXPECT_TRUE(worker.WaitFor(kNotServing));
  stopper.join();
}

// ---------------------------------------------------------------- ListWorkers

TEST_F(ServerProtocolTest, ListWorkersShowsEachWorkerWithItsHostClassLastSeenAndLeasedJob) {
  StartServer();
  const int64_t before = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  Register("gpu-b-d0", "host-b");
  Register("gpu-a-d0", "host-a");
  const int64_t job_id = Submit();
  ASSERT_TRUE(Lease("gpu-a-d0").leased());

  v1::ListWorkersRequest req;
  v1::ListWorkersResponse resp;
  grpc::Status s = stubs_.tuning->ListWorkers(Ctx().get(), req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.workers_size(), 2);
  EXPECT_FALSE(resp.truncated());
  EXPECT_GE(resp.now_unix_ms(), before);
  EXPECT_GT(resp.alive_window_ms(), 0);
  const v1::WorkerStatus& a = resp.workers(0);  // ordered by id
  const v1::WorkerStatus& b = resp.workers(1);
  EXPECT_EQ(a.worker_id(), "gpu-a-d0");
  EXPECT_EQ(a.host(), "host-a");
  EXPECT_EQ(a.device_class(), kCpuClass);
  EXPECT_EQ(a.backend(), "cpu");
  EXPECT_EQ(a.device_name(), "Test CPU");
  EXPECT_GE(a.last_seen_unix_ms(), before);
  EXPECT_LE(a.last_seen_unix_ms(), resp.now_unix_ms());
  EXPECT_GE(a.registered_unix_ms(), before);
  EXPECT_TRUE(a.alive());
  ASSERT_EQ(a.leased_job_ids_size(), 1);
  EXPECT_EQ(a.leased_job_ids(0), job_id);
  EXPECT_GT(a.lease_expiry_unix_ms(), resp.now_unix_ms());
  EXPECT_EQ(b.worker_id(), "gpu-b-d0");
  EXPECT_EQ(b.host(), "host-b");
  EXPECT_EQ(b.leased_job_ids_size(), 0);
  EXPECT_EQ(b.lease_expiry_unix_ms(), 0);

  req.set_limit(1);
  v1::ListWorkersResponse one;
  ASSERT_TRUE(stubs_.tuning->ListWorkers(Ctx().get(), req, &one).ok());
  EXPECT_EQ(one.workers_size(), 1);
  EXPECT_TRUE(one.truncated());
  req.set_limit(-1);
  EXPECT_EQ(stubs_.tuning->ListWorkers(Ctx().get(), req, &one).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServerProtocolTest, ListWorkersFollowsTheReadTokenRule) {
  StartServer();
  Register("w1");
  v1::ListWorkersRequest req;
  v1::ListWorkersResponse resp;
  EXPECT_EQ(stubs_.tuning->ListWorkers(Ctx("").get(), req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(stubs_.tuning->ListWorkers(Ctx("wrong").get(), req, &resp).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  server_.reset();

  ServerOptions open;
  open.open_reads = true;
  StartServer(open);
  grpc::Status s = stubs_.tuning->ListWorkers(Ctx("").get(), req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.workers_size(), 1);  // the same database: w1 is still registered
}

// ---------------------------------------------------------------- lease tokens (fencing)

TEST_F(ServerProtocolTest, AHolderWhoseLeaseEndedIsRefusedUnderItsOldToken) {
  StartServer();
  Register("w1");
  Register("w2");
  const int64_t job_id = Submit();
  const v1::LeaseJobResponse first = Lease("w1");
  ASSERT_TRUE(first.leased());
  const int64_t old_token = first.job().lease_token();
  EXPECT_GT(old_token, 0);
  // w1's lease ends (as an expiry would end it) and w2 gets the job with a new token.
  {
    v1::ReleaseJobRequest req;
    req.set_worker_id("w1");
    req.set_job_id(job_id);
    req.set_lease_token(old_token);
    v1::ReleaseJobResponse resp;
    ASSERT_TRUE(stubs_.worker->ReleaseJob(Ctx().get(), req, &resp).ok());
  }
  const v1::LeaseJobResponse second = Lease("w2");
  ASSERT_TRUE(second.leased());
  const int64_t new_token = second.job().lease_token();
  EXPECT_GT(new_token, old_token);

  // Heartbeat: the old lease is reported gone.
  {
    v1::HeartbeatRequest req;
    req.set_worker_id("w1");
    req.set_job_id(job_id);
    req.set_lease_token(old_token);
    v1::HeartbeatResponse resp;
    ASSERT_TRUE(stubs_.worker->Heartbeat(Ctx().get(), req, &resp).ok());
    EXPECT_FALSE(resp.lease_valid());
  }
  // Trials measured under the old lease are refused.
  {
    auto ctx = Ctx(kToken, "w1");
    ctx->AddMetadata(kLeaseTokenMetadata, std::to_string(old_token));
    v1::ReportTrialsResponse resp;
    auto writer = stubs_.worker->ReportTrials(ctx.get(), &resp);
    writer->Write(MakeTrial(second.job().run_id(), KeyOf(SeedProblem(128)), kConfig, 10));
    writer->WritesDone();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  // Its completion is refused with a message that says why, and changes nothing.
  {
    v1::CompleteJobRequest req;
    req.set_worker_id("w1");
    req.set_job_id(job_id);
    req.set_lease_token(old_token);
    req.set_success(true);
    v1::CompleteJobResponse resp;
    grpc::Status st = stubs_.worker->CompleteJob(Ctx().get(), req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
    EXPECT_NE(st.error_message().find("stale"), std::string::npos) << st.error_message();
  }
  EXPECT_EQ(GetJobOrFail(stubs_, job_id).state(), "leased");
  // The current holder completes under its token.
  {
    v1::CompleteJobRequest req;
    req.set_worker_id("w2");
    req.set_job_id(job_id);
    req.set_lease_token(new_token);
    req.set_success(true);
    v1::CompleteJobResponse resp;
    grpc::Status st = stubs_.worker->CompleteJob(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
  }
  EXPECT_EQ(GetJobOrFail(stubs_, job_id).state(), "done");
}

}  // namespace
}  // namespace fusetune::testing
