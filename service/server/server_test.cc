// The server through real gRPC on 127.0.0.1 with an ephemeral port, over a real SQLite file.
#include "fusetune/service/server.h"

#include <atomic>
#include <thread>

#include "fusetune/db/store.h"
#include "grpcpp/generic/generic_stub.h"
#include "server_test_util.h"
#include "testing/http_get.h"

namespace fusetune::testing {
namespace {

using v1::GetBestConfigResponse;

constexpr char kFused[] = "fused/bm64/bs64/t1/fp32/st1";
constexpr char kFusedSmall[] = "fused/bm32/bs32/t1/fp32/st1";
constexpr char kMaterialized[] = "materialized/bm64/bs64/t1/fp32/st1";

class ServerTest : public ::testing::Test {
 protected:
  // Metrics only where a test reads them: stopping the exporter (civetweb) takes ~2 s.
  void StartServer(ServerOptions options = {}, bool with_metrics = false) {
    if (!with_metrics) options.metrics_address.clear();
    options.db_path = dir_.File("fusetune.db");
    options.token = kToken;
    options.refresh_ms = 100;
    auto server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stubs_ = Connect(server_->port());
  }

  // Seeds best configs straight into the database before the server starts.
  void SeedBest(const std::string& device_class, const v1::Problem& problem, const std::string& config,
                double median_us, int64_t run_id, const std::string& commit) {
    auto store = Store::Open(dir_.File("fusetune.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    RunInfo run;
    run.commit = commit;
    run.device.backend = "cpu";
    run.label = "seed";
    auto id = (*store)->BeginRun(run);
    ASSERT_TRUE(id.ok()) << id.status();
    BestConfig b;
    b.device_class = device_class;
    b.problem_key = KeyOf(problem);
    b.config_key = config;
    b.median_us = median_us;
    b.p10_us = median_us;
    b.p90_us = median_us;
    b.max_rel_error = 3e-7;
    b.speedup_vs_materialized = 2.5;
    b.run_id = *id;
    b.commit = commit;
    ASSERT_TRUE((*store)->UpsertBestConfig(b).ok());
  }

  GetBestConfigResponse Best(const v1::Problem& problem, const std::string& device_class) {
    v1::GetBestConfigRequest req;
    *req.mutable_problem() = problem;
    req.set_device_class(device_class);
    GetBestConfigResponse resp;
    grpc::Status s = stubs_.tuning->GetBestConfig(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  void Register(const std::string& worker_id) {
    grpc::Status s = RegisterCpuWorker(stubs_, worker_id);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  int64_t Submit(const std::vector<v1::Problem>& problems, const std::string& device_class = kCpuClass) {
    v1::SubmitTuningJobRequest req;
    for (const auto& p : problems) *req.add_problems() = p;
    req.set_device_class(device_class);
    req.set_commit("abc123");
    req.set_max_trials(4);
    v1::SubmitTuningJobResponse resp;
    grpc::Status s = stubs_.tuning->SubmitTuningJob(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job_id();
  }

  v1::LeaseJobResponse Lease(const std::string& worker_id, int wait_ms = 0) {
    v1::LeaseJobRequest req;
    req.set_worker_id(worker_id);
    req.set_device_class(kCpuClass);
    req.set_wait_ms(wait_ms);
    v1::LeaseJobResponse resp;
    grpc::Status s = stubs_.worker->LeaseJob(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  grpc::Status Complete(const std::string& worker_id, int64_t job_id, bool success = true) {
    return CompleteJob(stubs_, worker_id, job_id, success);
  }

  v1::Job GetJob(int64_t job_id) { return GetJobOrFail(stubs_, job_id); }

  ScratchDir dir_;
  std::unique_ptr<Server> server_;
  Stubs stubs_;
};

TEST_F(ServerTest, AnswersExactThenNearestThenDefaultWithProvenance) {
  SeedBest(kCpuClass, SeedProblem(2048), kFused, 812.5, 0, "c2048");
  SeedBest(kCpuClass, SeedProblem(256), kFusedSmall, 20.0, 0, "c256");
  StartServer();

  GetBestConfigResponse exact = Best(SeedProblem(2048), kCpuClass);
  EXPECT_EQ(exact.provenance(), GetBestConfigResponse::EXACT);
  EXPECT_EQ(exact.config().key(), kFused);
  EXPECT_EQ(exact.source_problem_key(), KeyOf(SeedProblem(2048)));
  EXPECT_EQ(exact.problem_key(), KeyOf(SeedProblem(2048)));
  EXPECT_DOUBLE_EQ(exact.distance(), 0.0);
  EXPECT_DOUBLE_EQ(exact.median_us(), 812.5);
  EXPECT_DOUBLE_EQ(exact.speedup_vs_materialized(), 2.5);
  EXPECT_EQ(exact.commit(), "c2048");
  EXPECT_GT(exact.run_id(), 0);

  // S = 1024: one doubling of q and of k from 2048 (distance 2), three each from 256 (6).
  GetBestConfigResponse nearest = Best(SeedProblem(1024), kCpuClass);
  EXPECT_EQ(nearest.provenance(), GetBestConfigResponse::NEAREST);
  EXPECT_EQ(nearest.source_problem_key(), KeyOf(SeedProblem(2048)));
  EXPECT_EQ(nearest.config().key(), kFused);
  EXPECT_DOUBLE_EQ(nearest.distance(), 2.0);
  EXPECT_EQ(nearest.commit(), "c2048");
  // S = 128 is one doubling from 256 in q and k.
  GetBestConfigResponse nearest_small = Best(SeedProblem(128), kCpuClass);
  EXPECT_EQ(nearest_small.provenance(), GetBestConfigResponse::NEAREST);
  EXPECT_EQ(nearest_small.config().key(), kFusedSmall);
  EXPECT_DOUBLE_EQ(nearest_small.distance(), 2.0);

  // Another head_dim, or a causal mask, or another device class: nothing comparable.
  GetBestConfigResponse other_dim = Best(SeedProblem(2048, 128), kCpuClass);
  EXPECT_EQ(other_dim.provenance(), GetBestConfigResponse::DEFAULT);
  EXPECT_EQ(other_dim.config().key(), "fused/bm64/bs64/t1/fp32/st1");
  EXPECT_TRUE(other_dim.source_problem_key().empty());
  v1::Problem causal = SeedProblem(2048);
  causal.set_causal(true);
  EXPECT_EQ(Best(causal, kCpuClass).provenance(), GetBestConfigResponse::DEFAULT);
  v1::Problem half = SeedProblem(2048);
  half.set_dtype("bf16");
  GetBestConfigResponse gpu = Best(half, "cuda/NVIDIA-H200/sm90");
  EXPECT_EQ(gpu.provenance(), GetBestConfigResponse::DEFAULT);
  EXPECT_EQ(gpu.config().precision(), "bf16");
  EXPECT_EQ(gpu.config().threads(), 128);
}

// A decode problem on the wire: 32 query heads, 8 KV heads, d128, bf16, `cache` keys, paged when `page` > 0.
v1::Problem DecodeProto(int batch, int cache, int page = 0) {
  v1::Problem p;
  p.set_kind("decode");
  p.set_batch(batch);
  p.set_q_heads(32);
  p.set_kv_heads(8);
  p.set_q_len(1);
  p.set_kv_len(cache);
  p.set_head_dim(128);
  p.set_causal(true);
  p.set_dtype("bf16");
  p.set_page_block_size(page);
  return p;
}

TEST_F(ServerTest, DecodeShapesAreServedFromTheClosestCacheLengthOfTheSamePageSize) {
  const std::string gpu = "cuda/NVIDIA-H200/sm90";
  SeedBest(gpu, DecodeProto(16, 8192), "fused/bm16/bs64/t128/bf16/st2/sk4", 90.0, 0, "c8k");
  SeedBest(gpu, DecodeProto(16, 32768), "fused/bm16/bs64/t128/bf16/st2/sk8", 300.0, 0, "c32k");
  SeedBest(gpu, DecodeProto(16, 8192, 16), "fused/bm16/bs16/t128/bf16/st2/sk4", 95.0, 0, "p16");
  StartServer();
  GetBestConfigResponse exact = Best(DecodeProto(16, 8192, 16), gpu);
  EXPECT_EQ(exact.provenance(), GetBestConfigResponse::EXACT);
  EXPECT_EQ(exact.config().key(), "fused/bm16/bs16/t128/bf16/st2/sk4");
  // 6000 keys share 8k's bucket; 20000 is one bucket from 32k and two from 8k.
  GetBestConfigResponse near_8k = Best(DecodeProto(16, 6000), gpu);
  EXPECT_EQ(near_8k.provenance(), GetBestConfigResponse::NEAREST);
  EXPECT_EQ(near_8k.source_problem_key(), KeyOf(DecodeProto(16, 8192)));
  EXPECT_DOUBLE_EQ(near_8k.distance(), 0.0);
  GetBestConfigResponse near_32k = Best(DecodeProto(16, 20000), gpu);
  EXPECT_EQ(near_32k.source_problem_key(), KeyOf(DecodeProto(16, 32768)));
  // A paged request with a shared prefix and its own pool: served by the tuned page-16 shape.
  v1::Problem prefixed = DecodeProto(8, 4096, 16);
  prefixed.set_shared_prefix_pages(64);
  prefixed.set_kv_pool_pages(2000);
  GetBestConfigResponse paged = Best(prefixed, gpu);
  EXPECT_EQ(paged.provenance(), GetBestConfigResponse::NEAREST);
  EXPECT_EQ(paged.source_problem_key(), KeyOf(DecodeProto(16, 8192, 16)));
  EXPECT_EQ(paged.problem_key(), KeyOf(prefixed));
  // Page size 1 was never tuned: the default, never a page-16 or contiguous config.
  EXPECT_EQ(Best(DecodeProto(16, 8192, 1), gpu).provenance(), GetBestConfigResponse::DEFAULT);
}

TEST_F(ServerTest, BatchAnswersEachEntryAndReportsBadOnesInPlace) {
  SeedBest(kCpuClass, SeedProblem(512), kFused, 50.0, 0, "c");
  StartServer();
  v1::BatchGetBestConfigRequest req;
  auto* good = req.add_requests();
  *good->mutable_problem() = SeedProblem(512);
  good->set_device_class(kCpuClass);
  auto* bad = req.add_requests();
  *bad->mutable_problem() = SeedProblem(512, 1000);
  bad->set_device_class(kCpuClass);
  auto* unknown = req.add_requests();
  *unknown->mutable_problem() = SeedProblem(512);
  unknown->set_device_class("tpu/v5/x");
  v1::BatchGetBestConfigResponse resp;
  ASSERT_TRUE(stubs_.tuning->BatchGetBestConfig(Ctx().get(), req, &resp).ok());
  ASSERT_EQ(resp.entries_size(), 3);
  EXPECT_TRUE(resp.entries(0).error().empty());
  EXPECT_EQ(resp.entries(0).response().provenance(), GetBestConfigResponse::EXACT);
  EXPECT_NE(resp.entries(1).error().find("head_dim"), std::string::npos) << resp.entries(1).error();
  EXPECT_NE(resp.entries(2).error().find("tpu"), std::string::npos) << resp.entries(2).error();
}

TEST_F(ServerTest, JobFlowStoresTrialsAndServesTheSelectedBest) {
  StartServer();
  Register("w1");
  const int64_t job_id = Submit({SeedProblem(256), SeedProblem(512)});
  ASSERT_GT(job_id, 0);
  EXPECT_EQ(GetJob(job_id).state(), "queued");

  v1::LeaseJobResponse lease = Lease("w1");
  ASSERT_TRUE(lease.leased());
  EXPECT_EQ(lease.job().job_id(), job_id);
  EXPECT_EQ(lease.job().state(), "leased");
  EXPECT_EQ(lease.job().leased_by(), "w1");
  ASSERT_EQ(lease.problems_size(), 2);
  EXPECT_EQ(KeyOf(lease.problems(0)), KeyOf(SeedProblem(256)));
  EXPECT_EQ(lease.max_trials(), 4);
  const int64_t run = lease.job().run_id();
  ASSERT_GT(run, 0);

  const std::string k256 = KeyOf(SeedProblem(256)), k512 = KeyOf(SeedProblem(512));
  std::vector<v1::Trial> trials = {MakeTrial(run, k256, kFused, 30), MakeTrial(run, k256, kFusedSmall, 20),
                                   MakeTrial(run, k256, kMaterialized, 80), MakeTrial(run, k512, kFused, 90),
                                   MakeTrial(run, k512, kMaterialized, 270)};
  v1::ReportTrialsResponse report;
  ASSERT_TRUE(Report(stubs_, "w1", trials, &report).ok());
  EXPECT_EQ(report.received(), 5);
  EXPECT_EQ(report.inserted(), 5);
  EXPECT_EQ(GetJob(job_id).trials_recorded(), 5);

  ASSERT_TRUE(Complete("w1", job_id).ok());
  v1::Job done = GetJob(job_id);
  EXPECT_EQ(done.state(), "done");
  EXPECT_GT(done.finished_unix_ms(), 0);

  // The server answers what the database holds, with the tuner's selection.
  auto stored = server_->store()->GetBestConfig(kCpuClass, k256);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->config_key, kFusedSmall);
  GetBestConfigResponse best = Best(SeedProblem(256), kCpuClass);
  EXPECT_EQ(best.provenance(), GetBestConfigResponse::EXACT);
  EXPECT_EQ(best.config().key(), stored->config_key);
  EXPECT_DOUBLE_EQ(best.median_us(), 20);
  EXPECT_DOUBLE_EQ(best.speedup_vs_materialized(), 4.0);
  EXPECT_EQ(best.run_id(), run);
  EXPECT_EQ(best.commit(), "abc123");
  GetBestConfigResponse best512 = Best(SeedProblem(512), kCpuClass);
  EXPECT_EQ(best512.config().key(), kFused);
  EXPECT_DOUBLE_EQ(best512.speedup_vs_materialized(), 3.0);

  // ListTrials by run and by problem.
  v1::ListTrialsRequest list;
  list.set_run_id(run);
  v1::ListTrialsResponse listed;
  ASSERT_TRUE(stubs_.tuning->ListTrials(Ctx().get(), list, &listed).ok());
  EXPECT_EQ(listed.trials_size(), 5);
  EXPECT_FALSE(listed.truncated());
  list.set_limit(2);
  listed.Clear();
  ASSERT_TRUE(stubs_.tuning->ListTrials(Ctx().get(), list, &listed).ok());
  EXPECT_EQ(listed.trials_size(), 2);
  EXPECT_TRUE(listed.truncated());
  v1::ListTrialsRequest by_problem;
  by_problem.set_problem_key(k512);
  by_problem.set_device_class(kCpuClass);
  listed.Clear();
  ASSERT_TRUE(stubs_.tuning->ListTrials(Ctx().get(), by_problem, &listed).ok());
  EXPECT_EQ(listed.trials_size(), 2);

  v1::ListJobsRequest jobs_req;
  jobs_req.set_state("done");
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(stubs_.tuning->ListJobs(Ctx().get(), jobs_req, &jobs).ok());
  ASSERT_EQ(jobs.jobs_size(), 1);
  EXPECT_EQ(jobs.jobs(0).job_id(), job_id);
}

// A caller that waits for "done" and then asks for the job's best config gets it: the
// snapshot the reads answer from is refreshed before the job reads as done.
TEST_F(ServerTest, AJobThatReadsAsDoneAlreadyServesItsBestConfigs) {
  StartServer();
  Register("w1");
  for (int i = 0; i < 20; ++i) {
    const v1::Problem problem = SeedProblem(128 + 8 * i);
    const int64_t job_id = Submit({problem});
    v1::LeaseJobResponse lease = Lease("w1");
    ASSERT_TRUE(lease.leased());
    v1::ReportTrialsResponse report;
    ASSERT_TRUE(Report(stubs_, "w1", {MakeTrial(lease.job().run_id(), KeyOf(problem), kFused, 30)}, &report).ok());
    std::atomic<bool> go{false};
    GetBestConfigResponse::Provenance seen = GetBestConfigResponse::DEFAULT;
    std::thread watcher([&] {
      go.store(true);
      while (GetJob(job_id).state() != "done") {
      }
      seen = Best(problem, kCpuClass).provenance();
    });
    while (!go.load()) std::this_thread::yield();
    ASSERT_TRUE(Complete("w1", job_id).ok());
    watcher.join();
    EXPECT_EQ(seen, GetBestConfigResponse::EXACT) << "job " << job_id;
  }
}

TEST_F(ServerTest, CompletesExactlyOnce) {
  StartServer();
  Register("w1");
  Register("w2");
  const int64_t job_id = Submit({SeedProblem(128)});
  v1::LeaseJobResponse lease = Lease("w1");
  ASSERT_TRUE(lease.leased());
  // Another worker cannot complete it, before or after.
  EXPECT_EQ(Complete("w2", job_id).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(Complete("w1", job_id).ok());
  // A retry by the same worker is OK and changes nothing.
  const int64_t finished = GetJob(job_id).finished_unix_ms();
  EXPECT_TRUE(Complete("w1", job_id).ok());
  EXPECT_EQ(GetJob(job_id).finished_unix_ms(), finished);
  EXPECT_EQ(Complete("w2", job_id).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // The job never comes back to the queue.
  EXPECT_FALSE(Lease("w2").leased());
  // Trials for a finished job are refused.
  v1::ReportTrialsResponse report;
  grpc::Status late = Report(stubs_, "w1", {MakeTrial(lease.job().run_id(), KeyOf(SeedProblem(128)), kFused, 5)}, &report);
  EXPECT_EQ(late.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ServerTest, FailedJobIsStoredAsFailed) {
  StartServer();
  Register("w1");
  const int64_t job_id = Submit({SeedProblem(128)});
  ASSERT_TRUE(Lease("w1").leased());
  v1::CompleteJobRequest req;
  req.set_worker_id("w1");
  req.set_job_id(job_id);
  req.set_success(false);
  req.set_error("device lost");
  v1::CompleteJobResponse resp;
  ASSERT_TRUE(stubs_.worker->CompleteJob(Ctx().get(), req, &resp).ok());
  v1::Job job = GetJob(job_id);
  EXPECT_EQ(job.state(), "failed");
  EXPECT_EQ(job.error(), "device lost");
}

TEST_F(ServerTest, ExpiredLeaseReturnsTheJobToTheQueue) {
  ServerOptions options;
  options.lease_ms = 300;
  StartServer(options);
  Register("w1");
  Register("w2");
  const int64_t job_id = Submit({SeedProblem(128)});
  v1::LeaseJobResponse first = Lease("w1");
  ASSERT_TRUE(first.leased());
  const int64_t run = first.job().run_id();

  // w2 long-polls; w1 never heartbeats, so the lease expires and w2 gets the job.
  const auto start = std::chrono::steady_clock::now();
  v1::LeaseJobResponse second = Lease("w2", 10000);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(second.leased());
  EXPECT_EQ(second.job().job_id(), job_id);
  EXPECT_EQ(second.job().leased_by(), "w2");
  EXPECT_EQ(second.job().run_id(), run);  // the same run continues
  EXPECT_GE(second.job().attempts(), 2);
  EXPECT_LT(waited, 5.0);

  // w1 learns it lost the lease, and can neither upload to nor complete the job.
  v1::HeartbeatRequest hb;
  hb.set_worker_id("w1");
  hb.set_job_id(job_id);
  v1::HeartbeatResponse hb_resp;
  ASSERT_TRUE(stubs_.worker->Heartbeat(Ctx().get(), hb, &hb_resp).ok());
  EXPECT_FALSE(hb_resp.lease_valid());
  v1::ReportTrialsResponse report;
  EXPECT_EQ(Report(stubs_, "w1", {MakeTrial(run, KeyOf(SeedProblem(128)), kFused, 5)}, &report).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Complete("w1", job_id).error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  // w2 heartbeats in time and keeps it.
  hb.set_worker_id("w2");
  ASSERT_TRUE(stubs_.worker->Heartbeat(Ctx().get(), hb, &hb_resp).ok());
  EXPECT_TRUE(hb_resp.lease_valid());
  EXPECT_TRUE(Complete("w2", job_id).ok());
}

TEST_F(ServerTest, ReleasedJobGoesBackToTheQueue) {
  StartServer();
  Register("w1");
  Register("w2");
  const int64_t job_id = Submit({SeedProblem(128)});
  ASSERT_TRUE(Lease("w1").leased());
  v1::ReleaseJobRequest req;
  req.set_worker_id("w1");
  req.set_job_id(job_id);
  v1::ReleaseJobResponse resp;
  ASSERT_TRUE(stubs_.worker->ReleaseJob(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(GetJob(job_id).state(), "queued");
  v1::LeaseJobResponse again = Lease("w2");
  ASSERT_TRUE(again.leased());
  EXPECT_EQ(again.job().job_id(), job_id);
}

TEST_F(ServerTest, LongPollWakesOnSubmit) {
  StartServer();
  Register("w1");
  std::atomic<bool> leased{false};
  std::atomic<double> waited{0};
  std::thread poller([&] {
    const auto start = std::chrono::steady_clock::now();
    v1::LeaseJobResponse r = Lease("w1", 20000);
    waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    leased = r.leased();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Submit({SeedProblem(128)});
  poller.join();
  EXPECT_TRUE(leased);
  EXPECT_LT(waited, 10.0);  // woken by the submit, not by the 20 s timeout
}

TEST_F(ServerTest, LongPollWithoutJobsReturnsEmptyAfterTheWait) {
  StartServer();
  Register("w1");
  const auto start = std::chrono::steady_clock::now();
  v1::LeaseJobResponse r = Lease("w1", 400);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(r.leased());
  EXPECT_GE(waited, 0.35);
}

TEST_F(ServerTest, ReportTrialsIsIdempotentByTrialId) {
  StartServer();
  Register("w1");
  const int64_t job_id = Submit({SeedProblem(128)});
  v1::LeaseJobResponse lease = Lease("w1");
  ASSERT_TRUE(lease.leased());
  const int64_t run = lease.job().run_id();
  const std::string key = KeyOf(SeedProblem(128));
  std::vector<v1::Trial> trials = {MakeTrial(run, key, kFused, 10), MakeTrial(run, key, kFusedSmall, 12),
                                   MakeTrial(run, key, kMaterialized, 30)};
  v1::ReportTrialsResponse first, second, within;
  ASSERT_TRUE(Report(stubs_, "w1", trials, &first).ok());
  EXPECT_EQ(first.received(), 3);
  EXPECT_EQ(first.inserted(), 3);
  // The whole upload retried, plus a duplicate within one stream.
  ASSERT_TRUE(Report(stubs_, "w1", trials, &second).ok());
  EXPECT_EQ(second.received(), 3);
  EXPECT_EQ(second.inserted(), 0);
  std::vector<v1::Trial> dup = {MakeTrial(run, key, kFused, 10, 1), MakeTrial(run, key, kFused, 10, 1)};
  ASSERT_TRUE(Report(stubs_, "w1", dup, &within).ok());
  EXPECT_EQ(within.received(), 2);
  EXPECT_EQ(within.inserted(), 1);
  auto stored = server_->store()->ListTrials(run);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->size(), 4u);
  EXPECT_EQ(GetJob(job_id).trials_recorded(), 4);
}

TEST_F(ServerTest, HealthServiceReportsServing) {
  StartServer();
  // grpc.health.v1.Health/Check with an empty HealthCheckRequest; SERVING = 1 is encoded as
  // field 1 varint 1 (0x08 0x01).
  grpc::GenericStub generic(stubs_.channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  grpc::Status status;
  std::atomic<bool> done{false};
  std::mutex mu;
  std::condition_variable cv;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) {
                      std::lock_guard<std::mutex> lock(mu);
                      status = s;
                      done = true;
                      cv.notify_all();
                    });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done.load(); });
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

TEST_F(ServerTest, MetricsExposeRpcsQueueWorkersBestConfigsAndVerdicts) {
  StartServer({}, /*with_metrics=*/true);
  Register("w1");
  const int64_t job_id = Submit({SeedProblem(256)});
  v1::LeaseJobResponse lease = Lease("w1");
  ASSERT_TRUE(lease.leased());
  const std::string key = KeyOf(SeedProblem(256));
  v1::ReportTrialsResponse report;
  ASSERT_TRUE(Report(stubs_, "w1",
                     {MakeTrial(lease.job().run_id(), key, kFused, 25),
                      MakeTrial(lease.job().run_id(), key, kMaterialized, 100)},
                     &report)
                  .ok());
  Regression verdict;  // the gauges refresh with every CompleteJob
  verdict.commit = "c0ffee";
  verdict.baseline_commit = "abc123";
  verdict.device_class = kCpuClass;
  verdict.problem_key = KeyOf(SeedProblem(256));
  verdict.config_key = kFused;
  verdict.metric = "latency";
  verdict.ratio = 1.08;
  verdict.verdict = "regressed";
  ASSERT_TRUE(server_->store()->RecordRegression(verdict).ok());
  ASSERT_TRUE(Complete("w1", job_id).ok());
  Best(SeedProblem(256), kCpuClass);
  v1::GetBestConfigRequest bad;
  v1::GetBestConfigResponse ignored;
  EXPECT_FALSE(stubs_.tuning->GetBestConfig(Ctx().get(), bad, &ignored).ok());

  ASSERT_GT(server_->metrics_port(), 0);
  auto page = HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->status, 200);
  const std::string& text = page->body;
  EXPECT_NE(text.find("fusetune_rpc_requests_total{code=\"OK\",method=\"GetBestConfig\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("fusetune_rpc_requests_total{code=\"INVALID_ARGUMENT\",method=\"GetBestConfig\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("fusetune_rpc_latency_seconds_count{method=\"CompleteJob\"} 1"), std::string::npos) << text;
  // Methods not called yet are there at 0 (every method of both services, every code).
  EXPECT_NE(text.find("fusetune_rpc_requests_total{code=\"UNAUTHENTICATED\",method=\"ListRegressions\"} 0"),
            std::string::npos);
  EXPECT_NE(text.find("fusetune_jobs{state=\"done\"} 1"), std::string::npos);
  EXPECT_NE(text.find("fusetune_jobs{state=\"queued\"} 0"), std::string::npos);
  EXPECT_NE(text.find("fusetune_workers_alive 1"), std::string::npos);
  EXPECT_NE(text.find("fusetune_trials_recorded_total 2"), std::string::npos);
  const std::string labels = "{device_class=\"" + std::string(kCpuClass) + "\",problem=\"" + key + "\"}";
  EXPECT_NE(text.find("fusetune_best_latency_seconds" + labels + " 2.5e-05"), std::string::npos) << text;
  EXPECT_NE(text.find("fusetune_best_speedup_vs_materialized" + labels + " 4"), std::string::npos);
  EXPECT_NE(text.find("fusetune_best_max_rel_error" + labels), std::string::npos);
  EXPECT_NE(text.find("fusetune_regressions_latest{verdict=\"regressed\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("verdict=\"regressed\"} 1.08"), std::string::npos) << text;
}

TEST_F(ServerTest, RefusesTooManyConcurrentLongPolls) {
  ServerOptions options;
  options.max_concurrent_long_polls = 1;
  StartServer(options);
  Register("w1");
  Register("w2");
  std::thread poller([&] { Lease("w1", 1500); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  v1::LeaseJobRequest req;
  req.set_worker_id("w2");
  req.set_wait_ms(100);
  v1::LeaseJobResponse resp;
  EXPECT_EQ(stubs_.worker->LeaseJob(Ctx().get(), req, &resp).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  poller.join();
  // The slot is free again.
  EXPECT_TRUE(stubs_.worker->LeaseJob(Ctx().get(), req, &resp).ok());
}

TEST_F(ServerTest, RefusesTooManyConcurrentTrialStreams) {
  ServerOptions options;
  options.max_concurrent_streams = 1;
  StartServer(options);
  Register("w1");
  Submit({SeedProblem(128)});
  v1::LeaseJobResponse lease = Lease("w1");
  ASSERT_TRUE(lease.leased());
  const v1::Trial trial = MakeTrial(lease.job().run_id(), KeyOf(SeedProblem(128)), kFused, 10);
  // The first stream stays open (one trial written, no WritesDone yet).
  v1::ReportTrialsResponse first_resp;
  auto first_ctx = Ctx(kToken, "w1");
  auto first = stubs_.worker->ReportTrials(first_ctx.get(), &first_resp);
  ASSERT_TRUE(first->Write(trial));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  v1::ReportTrialsResponse second_resp;
  EXPECT_EQ(Report(stubs_, "w1", {trial}, &second_resp).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  first->WritesDone();
  ASSERT_TRUE(first->Finish().ok());
  EXPECT_EQ(first_resp.inserted(), 1);
  // The slot is free again.
  EXPECT_TRUE(Report(stubs_, "w1", {trial}, &second_resp).ok());
  EXPECT_EQ(second_resp.inserted(), 0);
}

TEST_F(ServerTest, SeesBestConfigsWrittenByAnotherProcessAfterARefresh) {
  StartServer();
  EXPECT_EQ(Best(SeedProblem(512), kCpuClass).provenance(), GetBestConfigResponse::DEFAULT);
  SeedBest(kCpuClass, SeedProblem(512), kFusedSmall, 40.0, 0, "sweep");
  GetBestConfigResponse r;
  for (int i = 0; i < 50; ++i) {
    r = Best(SeedProblem(512), kCpuClass);
    if (r.provenance() == GetBestConfigResponse::EXACT) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(r.provenance(), GetBestConfigResponse::EXACT);
  EXPECT_EQ(r.config().key(), kFusedSmall);
}

TEST_F(ServerTest, ShutdownIsIdempotentAndEndsLongPolls) {
  StartServer();
  Register("w1");
  std::thread poller([&] {
    v1::LeaseJobRequest req;
    req.set_worker_id("w1");
    req.set_wait_ms(30000);
    v1::LeaseJobResponse resp;
    (void)stubs_.worker->LeaseJob(Ctx().get(), req, &resp);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto start = std::chrono::steady_clock::now();
  server_->Shutdown();
  server_->Shutdown();
  poller.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
}

TEST_F(ServerTest, ServesTheHtmlReportsBesideMetricsWithoutAToken) {
  SeedBest(kCpuClass, SeedProblem(256), kFused, 120.0, 0, "0123456789ab");
  {
    auto store = Store::Open(dir_.File("fusetune.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    RunInfo bench;
    bench.commit = "0123456789ab";
    bench.device.backend = "cpu";
    bench.device.name = "Test CPU";
    bench.device.arch = "x86_64";
    bench.label = "bench:nightly";
    bench.started_unix_ms = 1700000000000;
    bench.finished_unix_ms = 1700000100000;
    auto run = (*store)->BeginRun(bench);
    ASSERT_TRUE(run.ok()) << run.status();
    BenchCell cell;
    cell.suite = "night ly";  // a space: the index's link escapes it, the endpoint decodes it
    cell.problem_key = KeyOf(SeedProblem(256));
    cell.problem_json = "{}";
    cell.config_key = kFused;
    cell.role = "best";
    cell.blocks = {{10, 120.0, {}, {}, false}, {10, 121.0, {}, {}, false}};
    ASSERT_TRUE((*store)->RecordBenchCells(*run, {cell}).ok());
    Regression verdict;
    verdict.commit = "0123456789ab";
    verdict.baseline_commit = "0123456789ab";
    verdict.device_class = RunInfo{bench}.device.DeviceClass();
    verdict.problem_key = cell.problem_key;
    verdict.config_key = kFused;
    verdict.metric = "latency";
    verdict.ratio = 1.01;
    verdict.verdict = "same";
    ASSERT_TRUE((*store)->RecordRegression(verdict).ok());
  }
  StartServer({}, /*with_metrics=*/true);
  const int port = server_->metrics_port();
  auto index = HttpGet(port, "/reports/");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->status, 200);
  EXPECT_NE(index->body.find("href=\"/reports/tuning.html\""), std::string::npos) << index->body;
  EXPECT_NE(index->body.find("href=\"/reports/history/night%20ly.html\""), std::string::npos) << index->body;
  auto tuning = HttpGet(port, "/reports/tuning.html");
  ASSERT_TRUE(tuning.ok()) << tuning.status();
  EXPECT_EQ(tuning->status, 200);
  EXPECT_EQ(tuning->body.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(tuning->body.find(KeyOf(SeedProblem(256))), std::string::npos);
  auto history = HttpGet(port, "/reports/history/night%20ly.html");
  ASSERT_TRUE(history.ok()) << history.status();
  EXPECT_EQ(history->status, 200) << history->body;
  EXPECT_NE(history->body.find("fusetune history: suite night ly"), std::string::npos);
  EXPECT_NE(index->body.find("href=\"/reports/regress/0123456789ab.html\""), std::string::npos) << index->body;
  auto regress = HttpGet(port, "/reports/regress/0123456789ab.html");
  ASSERT_TRUE(regress.ok()) << regress.status();
  EXPECT_EQ(regress->status, 200) << regress->body;
  EXPECT_NE(regress->body.find("href=\"/reports/history/night%20ly.html#cell-"), std::string::npos) << regress->body;
  EXPECT_EQ(HttpGet(port, "/reports/regress/ffffffffffff.html")->status, 404);
  EXPECT_EQ(HttpGet(port, "/reports/history/no-such-suite.html")->status, 404);
  EXPECT_EQ(HttpGet(port, "/reports/nothing-here")->status, 404);
}

TEST(ServerStart, ReportsTakenPortsAndMissingTokenClearly) {
  ScratchDir dir;
  ServerOptions options;
  options.db_path = dir.File("a.db");
  options.token = kToken;
  auto first = Server::Start(options);
  ASSERT_TRUE(first.ok()) << first.status();

  ServerOptions taken_metrics = options;
  taken_metrics.db_path = dir.File("b.db");
  taken_metrics.metrics_address = "127.0.0.1:" + std::to_string((*first)->metrics_port());
  auto second = Server::Start(taken_metrics);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(taken_metrics.metrics_address), std::string::npos);

  ServerOptions taken_grpc = options;
  taken_grpc.db_path = dir.File("c.db");
  taken_grpc.listen_address = "127.0.0.1:" + std::to_string((*first)->port());
  auto third = Server::Start(taken_grpc);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kUnavailable);

  ServerOptions no_token = options;
  no_token.token.clear();
  no_token.db_path = dir.File("d.db");
  ::unsetenv("FUSETUNE_TOKEN");
  EXPECT_EQ(Server::Start(no_token).status().code(), absl::StatusCode::kInvalidArgument);
  no_token.token_file = dir.File("missing-token");
  EXPECT_EQ(Server::Start(no_token).status().code(), absl::StatusCode::kNotFound);

  ServerOptions half_tls = options;
  half_tls.db_path = dir.File("e.db");
  half_tls.tls_cert_file = dir.File("cert.pem");
  EXPECT_EQ(Server::Start(half_tls).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fusetune::testing
