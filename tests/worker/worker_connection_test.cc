// The worker's side of its connection to the service: it re-registers on the structured
// WORKER_NOT_REGISTERED reason (not on message text), and after the server restarts on the
// same port it reconnects within its own backoff bounds.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "fusetune/kernels/cpu_backend.h"
#include "fusetune/proto/fusetune.grpc.pb.h"
#include "fusetune/wire/connection.h"
#include "fusetune/wire/convert.h"
#include "fusetune/wire/status.h"
#include "fusetune/service/server.h"
#include "fusetune/worker/worker.h"
#include "grpcpp/grpcpp.h"

namespace fusetune {
namespace {

constexpr char kToken[] = "worker-connection-test-token";

std::filesystem::path TestDir() {
  auto dir = std::filesystem::temp_directory_path() /
             ("worker_connection_test_" + std::to_string(::getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

WorkerOptions BaseOptions(const std::string& address, const std::filesystem::path& dir) {
  WorkerOptions o;
  o.server = address;
  o.token = kToken;
  o.spool_dir = (dir / "spool").string();
  o.worker_id = "wc";
  o.cpu_devices = 1;
  o.lease_wait_ms = 500;
  o.backoff = {.initial_ms = 20, .max_ms = 200, .multiplier = 2.0, .jitter = 0.5};
  o.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  return o;
}

// Runs a Worker on a thread until the object dies.
class RunningWorker {
 public:
  explicit RunningWorker(WorkerOptions options) {
    auto w = Worker::Create(std::move(options));
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) return;
    worker_ = *std::move(w);
    thread_ = std::thread([this] { (void)worker_->Run(); });
  }
  ~RunningWorker() {
    if (!worker_) return;
    worker_->RequestStop();
    thread_.join();
  }
  Worker* get() { return worker_.get(); }

 private:
  std::unique_ptr<Worker> worker_;
  std::thread thread_;
};

// Polls `done` every 20 ms for up to `seconds`.
template <typename F>
bool WaitUntil(F done, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

// ---------------------------------------------------------------- error reasons

// A WorkerService that accepts registrations and refuses every LeaseJob with
// FAILED_PRECONDITION: with the WORKER_NOT_REGISTERED reason (and a message that does not
// say so), or without it (and a message that does).
class RefusingWorkerService final : public v1::WorkerService::Service {
 public:
  explicit RefusingWorkerService(bool with_reason) : with_reason_(with_reason) {}
  grpc::Status RegisterWorker(grpc::ServerContext*, const v1::RegisterWorkerRequest*,
                              v1::RegisterWorkerResponse* resp) override {
    registers_.fetch_add(1);
    resp->set_lease_ms(60000);
    resp->set_heartbeat_ms(60000);
    return grpc::Status::OK;
  }
  grpc::Status LeaseJob(grpc::ServerContext* ctx, const v1::LeaseJobRequest*, v1::LeaseJobResponse*) override {
    leases_.fetch_add(1);
    if (with_reason_) {
      ctx->AddTrailingMetadata(kErrorReasonMetadata, kReasonWorkerNotRegistered);
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "who are you?");
    }
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "worker 'wc-d0' is not registered (but no reason says so)");
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*, v1::HeartbeatResponse*) override {
    return grpc::Status::OK;
  }
  int registers() const { return registers_.load(); }
  int leases() const { return leases_.load(); }

 private:
  const bool with_reason_;
  std::atomic<int> registers_{0};
  std::atomic<int> leases_{0};
};

class FakeServer {
 public:
  explicit FakeServer(grpc::Service* service) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service);
    server_ = builder.BuildAndStart();
  }
  ~FakeServer() { server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1)); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST(WorkerConnectionTest, ReRegistersOnTheWorkerNotRegisteredReasonWhateverTheMessage) {
  const auto dir = TestDir();
  RefusingWorkerService service(/*with_reason=*/true);
  FakeServer server(&service);
  RunningWorker worker(BaseOptions(server.address(), dir));
  EXPECT_TRUE(WaitUntil([&] { return service.registers() >= 3; }, 30))
      << service.registers() << " registrations after " << service.leases() << " refused leases";
  std::filesystem::remove_all(dir);
}

TEST(WorkerConnectionTest, OtherFailedPreconditionsDoNotTriggerARegistrationEvenIfTheTextSaysSo) {
  const auto dir = TestDir();
  RefusingWorkerService service(/*with_reason=*/false);
  FakeServer server(&service);
  RunningWorker worker(BaseOptions(server.address(), dir));
  ASSERT_TRUE(WaitUntil([&] { return service.leases() >= 5; }, 30)) << service.leases() << " leases";
  EXPECT_EQ(service.registers(), 1) << "after " << service.leases() << " refused leases";
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------- reconnect

ServerOptions RealServerOptions(const std::filesystem::path& dir, const std::string& listen) {
  ServerOptions o;
  o.listen_address = listen;
  o.db_path = (dir / "db.sqlite").string();
  o.token = kToken;
  o.open_reads = true;
  o.metrics_address = "";
  o.lease_ms = 60000;
  o.heartbeat_ms = 1000;
  o.refresh_ms = 100;
  return o;
}

int64_t SubmitOne(const std::string& address) {
  auto stub = v1::TuningService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  v1::SubmitTuningJobRequest req;
  AttentionProblem p;
  p.batch = 1;
  p.q_heads = 1;
  p.kv_heads = 1;
  p.q_len = 16;
  p.kv_len = 16;
  p.head_dim = 32;
  ProblemToProto(p, req.add_problems());
  req.set_device_class(CreateCpuBackend()->Describe().DeviceClass());
  req.set_max_trials(1);
  req.add_variants("fused");
  v1::SubmitTuningJobResponse resp;
  grpc::ClientContext ctx;
  AddBearerToken(ctx, kToken);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Status st = stub->SubmitTuningJob(&ctx, req, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return resp.job_id();
}

// How long an outage lasts (FUSETUNE_TEST_OUTAGE_S overrides, for measuring by hand).
double OutageSeconds() {
  const char* env = std::getenv("FUSETUNE_TEST_OUTAGE_S");
  return env != nullptr ? std::atof(env) : 4.0;
}

// The worker's backoff caps both its own retries and gRPC's reconnect attempts at max_ms,
// and its long-polls wait for the channel to reconnect, so after the server comes back on
// the same port the worker leases within about max_ms. Measured on a 2-core machine with
// max 1000 ms: 0.07-0.91 s after 2-10 s outages (before: 0.8-1.5 s with the bounded channel
// alone; 0.3-4.8 s with gRPC's default 1 s x1.6 reconnect backoff). The bound asserted here
// stays generous for a loaded machine, so it catches an unbounded backoff, not a small
// slowdown; FUSETUNE_TEST_OUTAGE_S sets the outage for measuring by hand.
TEST(WorkerConnectionTest, ReconnectsAndLeasesSoonAfterTheServerRestartsOnTheSamePort) {
  const auto dir = TestDir();
  auto first = Server::Start(RealServerOptions(dir, "127.0.0.1:0"));
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  WorkerOptions options = BaseOptions(address, dir);
  options.backoff = {.initial_ms = 50, .max_ms = 500, .multiplier = 2.0, .jitter = 0.5};
  RunningWorker worker(options);
  ASSERT_TRUE(WaitUntil([&] { return (*first)->store()->ListWorkers()->size() == 1; }, 30));

  first->reset();  // the server goes away...
  std::this_thread::sleep_for(std::chrono::duration<double>(OutageSeconds()));
  auto second = Server::Start(RealServerOptions(dir, address));  // ...and comes back on the same port
  ASSERT_TRUE(second.ok()) << second.status();
  const auto restarted = std::chrono::steady_clock::now();
  const int64_t job_id = SubmitOne(address);
  const bool leased = WaitUntil(
      [&] {
        auto job = (*second)->store()->GetJob(job_id);
        return job.ok() && job->state != JobState::kQueued;
      },
      30);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - restarted).count();
  std::fprintf(stderr, "outage %.1f s: the worker leased %.2f s after the restart (backoff max %lld ms)\n",
               OutageSeconds(), seconds, static_cast<long long>(options.backoff.max_ms));
  ASSERT_TRUE(leased);
  EXPECT_LT(seconds, 20 * options.backoff.max_ms / 1000.0) << "reconnect not bounded by the worker's backoff";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fusetune
