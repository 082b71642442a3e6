// Random bytes and randomly mutated messages to every RPC: the server answers each with a
// status (never crashes, never hangs) and keeps serving afterwards.
#include <iterator>
#include <random>

#include "fusetune/wire/connection.h"
#include "fusetune/service/server.h"
#include "grpcpp/generic/generic_stub.h"
#include "server_test_util.h"

namespace fusetune::testing {
namespace {

const char* const kUnaryMethods[] = {
    "/fusetune.v1.TuningService/GetBestConfig",  "/fusetune.v1.TuningService/BatchGetBestConfig",
    "/fusetune.v1.TuningService/SubmitTuningJob", "/fusetune.v1.TuningService/GetJob",
    "/fusetune.v1.TuningService/ListJobs",        "/fusetune.v1.TuningService/ListTrials",
    "/fusetune.v1.TuningService/ListRegressions", "/fusetune.v1.WorkerService/RegisterWorker",
    "/fusetune.v1.WorkerService/LeaseJob",        "/fusetune.v1.WorkerService/Heartbeat",
    "/fusetune.v1.WorkerService/CompleteJob",     "/fusetune.v1.WorkerService/ReleaseJob",
    "/fusetune.v1.WorkerService/ReportAudit",     "/fusetune.v1.TuningService/ListAudits",
    "/fusetune.v1.TuningService/ReportRegressions",
};

grpc::Status CallRaw(grpc::GenericStub& stub, const std::string& method, const std::string& bytes) {
  grpc::ClientContext ctx;
  AddBearerToken(ctx, kToken);
  ctx.AddMetadata("x-fusetune-worker-id", "fuzz-worker");
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(s);
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return status;
}

// A valid message of each request type, serialized, to mutate.
std::vector<std::string> Seeds() {
  std::vector<std::string> seeds;
  v1::GetBestConfigRequest best;
  *best.mutable_problem() = SeedProblem(512);
  best.set_device_class(kCpuClass);
  seeds.push_back(best.SerializeAsString());
  v1::SubmitTuningJobRequest submit;
  *submit.add_problems() = SeedProblem(128);
  submit.set_device_class(kCpuClass);
  seeds.push_back(submit.SerializeAsString());
  v1::RegisterWorkerRequest reg;
  reg.set_worker_id("fuzz-worker");
  *reg.mutable_device() = CpuDevice();
  seeds.push_back(reg.SerializeAsString());
  v1::LeaseJobRequest lease;
  lease.set_worker_id("fuzz-worker");
  seeds.push_back(lease.SerializeAsString());
  seeds.push_back(MakeTrial(1, KeyOf(SeedProblem(128)), "fused/bm64/bs64/t1/fp32/st1", 3).SerializeAsString());
  v1::ReportRegressionsRequest verdicts;
  v1::Regression* verdict = verdicts.add_regressions();
  verdict->set_commit("c0ffee123456");
  verdict->set_baseline_commit("abc123456789");
  verdict->set_device_class(kCpuClass);
  verdict->set_problem_key(KeyOf(SeedProblem(128)));
  verdict->set_config_key("fused/bm64/bs64/t1/fp32/st1");
  verdict->set_metric("latency");
  verdict->set_ratio(1.05);
  verdict->set_verdict("regressed");
  seeds.push_back(verdicts.SerializeAsString());
  return seeds;
}

TEST(ServerFuzz, RandomAndMutatedRequestsGetAStatusAndTheServerKeepsServing) {
  ScratchDir dir;
  ServerOptions options;
  options.db_path = dir.File("fusetune.db");
  options.token = kToken;
  options.metrics_address.clear();
  auto server = Server::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  Stubs stubs = Connect((*server)->port());
  grpc::GenericStub generic(stubs.channel);

  std::mt19937 rng(20261129);
  const std::vector<std::string> seeds = Seeds();
  int calls = 0;
  for (const char* method : kUnaryMethods) {
    for (int i = 0; i < 40; ++i) {
      std::string bytes;
      if (i % 2 == 0) {
        // Pure noise, up to 256 bytes.
        bytes.resize(rng() % 257);
        for (char& c : bytes) c = static_cast<char>(rng());
      } else {
        // A valid message of some type with a few bytes flipped (a different method's
        // message often parses as this one's with odd field values).
        bytes = seeds[rng() % seeds.size()];
        for (int flips = 1 + static_cast<int>(rng() % 4); flips > 0 && !bytes.empty(); --flips) {
          bytes[rng() % bytes.size()] = static_cast<char>(rng());
        }
      }
      grpc::Status s = CallRaw(generic, method, bytes);
      EXPECT_NE(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << method;
      ++calls;
    }
  }
  EXPECT_EQ(calls, static_cast<int>(std::size(kUnaryMethods)) * 40);

  // Still serving, and a well-formed request still works.
  v1::GetBestConfigRequest req;
  *req.mutable_problem() = SeedProblem(512);
  req.set_device_class(kCpuClass);
  v1::GetBestConfigResponse resp;
  grpc::Status ok = stubs.tuning->GetBestConfig(Ctx().get(), req, &resp);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
}

}  // namespace
}  // namespace fusetune::testing
