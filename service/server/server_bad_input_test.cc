// Every RPC against malformed, out-of-range and unauthenticated requests: each gets a clear
// status (never a crash), and a refused write leaves nothing in the database.
#include <fstream>
#include <limits>

#include "fusetune/db/store.h"
#include "fusetune/service/server.h"
#include "server_test_util.h"

namespace fusetune::testing {
namespace {

using grpc::StatusCode;

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(false); }

  void Start(bool open_reads) {
    server_.reset();
    // The token comes from a file here (first line, surrounding whitespace ignored).
    const std::string token_file = dir_.File("token");
    std::ofstream(token_file) << "  " << kToken << "\n";
    ServerOptions options;
    options.db_path = dir_.File("fusetune.db");
    options.token_file = token_file;
    options.open_reads = open_reads;
    options.metrics_address.clear();  // not read here; stopping the exporter takes ~2 s
    auto server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stubs_ = Connect(server_->port());
  }

  void Register(const std::string& worker_id) {
    v1::RegisterWorkerRequest req;
    req.set_worker_id(worker_id);
    *req.mutable_device() = CpuDevice();
    v1::RegisterWorkerResponse resp;
    ASSERT_TRUE(stubs_.worker->RegisterWorker(Ctx().get(), req, &resp).ok());
  }

  StatusCode BestCode(const v1::Problem& problem, const std::string& device_class,
                      const std::string& token = kToken) {
    v1::GetBestConfigRequest req;
    *req.mutable_problem() = problem;
    req.set_device_class(device_class);
    v1::GetBestConfigResponse resp;
    return stubs_.tuning->GetBestConfig(Ctx(token).get(), req, &resp).error_code();
  }

  StatusCode SubmitCode(const v1::SubmitTuningJobRequest& req, const std::string& token = kToken) {
    v1::SubmitTuningJobResponse resp;
    return stubs_.tuning->SubmitTuningJob(Ctx(token).get(), req, &resp).error_code();
  }

  static v1::SubmitTuningJobRequest GoodSubmit() {
    v1::SubmitTuningJobRequest req;
    *req.add_problems() = SeedProblem(128);
    req.set_device_class(kCpuClass);
    req.set_commit("abc123");
    return req;
  }

  size_t JobsInDb() { return server_->store()->ListJobs(std::nullopt, 1000).value().size(); }
  size_t WorkersInDb() { return server_->store()->ListWorkers().value().size(); }

  ScratchDir dir_;
  std::unique_ptr<Server> server_;
  Stubs stubs_;
};

TEST_F(BadInputTest, GetBestConfigRejectsMalformedProblemsAndDeviceClasses) {
  const auto kInvalid = StatusCode::INVALID_ARGUMENT;
  v1::Problem p = SeedProblem(128);
  p.set_q_heads(0);
  EXPECT_EQ(BestCode(p, kCpuClass), kInvalid);
  EXPECT_EQ(BestCode(SeedProblem(128, 1000), kCpuClass), kInvalid);
  EXPECT_EQ(BestCode(SeedProblem(128, 1), kCpuClass), kInvalid);
  p = SeedProblem(128);
  p.set_batch(std::numeric_limits<int32_t>::max());
  EXPECT_EQ(BestCode(p, kCpuClass), kInvalid);
  p = SeedProblem(128);
  p.set_batch(-1);
  EXPECT_EQ(BestCode(p, kCpuClass), kInvalid);
  p = SeedProblem(128);
  p.set_q_len(0);
  EXPECT_EQ(BestCode(p, kCpuClass), kInvalid);
  p = SeedProblem(128);
  p.set_kv_heads(5);  // does not divide 12
  EXPECT_EQ(BestCode(p, kCpuClass), kInvalid);
  p = SeedProblem(128);
  p.set_dtype("fp8");
  EXPECT_EQ(BestCode(p, kCpuClass), kInvalid);
  p = SeedProblem(128);
  p.add_cu_seqlens_q(0);  // varlen with only one list
  EXPECT_EQ(BestCode(p, kCpuClass), kInvalid);
  EXPECT_EQ(BestCode(v1::Problem(), kCpuClass), kInvalid);  // no problem at all
  EXPECT_EQ(BestCode(SeedProblem(128), "tpu/v5/x"), kInvalid);
  EXPECT_EQ(BestCode(SeedProblem(128), ""), kInvalid);
  EXPECT_EQ(BestCode(SeedProblem(128), "cpu"), kInvalid);
  EXPECT_EQ(BestCode(SeedProblem(128), "cpu/" + std::string(5000, 'x') + "/y"), kInvalid);
  // A well-formed problem and class still answer.
  EXPECT_EQ(BestCode(SeedProblem(128), kCpuClass), StatusCode::OK);
}

TEST_F(BadInputTest, BatchGetBestConfigCapsEntries) {
  v1::BatchGetBestConfigRequest req;
  for (int i = 0; i < 1025; ++i) {
    auto* r = req.add_requests();
    *r->mutable_problem() = SeedProblem(128);
    r->set_device_class(kCpuClass);
  }
  v1::BatchGetBestConfigResponse resp;
  EXPECT_EQ(stubs_.tuning->BatchGetBestConfig(Ctx().get(), req, &resp).error_code(), StatusCode::INVALID_ARGUMENT);
  req.mutable_requests()->RemoveLast();
  EXPECT_TRUE(stubs_.tuning->BatchGetBestConfig(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(resp.entries_size(), 1024);
}

TEST_F(BadInputTest, OversizedMessagesAreRefused) {
  // A 5 MiB length list is beyond the 4 MiB receive limit.
  v1::GetBestConfigRequest req;
  *req.mutable_problem() = SeedProblem(128);
  req.set_device_class(kCpuClass);
  for (int i = 0; i < (5 << 20) / 4; ++i) req.mutable_problem()->add_kv_valid_lens(1 << 30);
  v1::GetBestConfigResponse resp;
  EXPECT_EQ(stubs_.tuning->GetBestConfig(Ctx().get(), req, &resp).error_code(), StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(BadInputTest, SubmitTuningJobValidatesEverythingAndWritesNothingOnError) {
  const auto kInvalid = StatusCode::INVALID_ARGUMENT;
  v1::SubmitTuningJobRequest req = GoodSubmit();
  req.clear_problems();
  EXPECT_EQ(SubmitCode(req), kInvalid);
  req = GoodSubmit();
  for (int i = 0; i < 256; ++i) *req.add_problems() = SeedProblem(128 + 8 * (i + 1));
  EXPECT_EQ(SubmitCode(req), kInvalid);  // 257 problems
  req = GoodSubmit();
  req.mutable_problems(0)->set_head_dim(1000);
  EXPECT_EQ(SubmitCode(req), kInvalid);
  req = GoodSubmit();
  req.mutable_problems(0)->set_q_heads(0);
  EXPECT_EQ(SubmitCode(req), kInvalid);
  req = GoodSubmit();
  req.set_device_class("gpu/whatever/x");
  EXPECT_EQ(SubmitCode(req), kInvalid);
  req = GoodSubmit();
  req.set_max_trials(-1);
  EXPECT_EQ(SubmitCode(req), kInvalid);
  req = GoodSubmit();
  req.set_max_seconds(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(SubmitCode(req), kInvalid);
  req = GoodSubmit();
  req.add_variants("turbo");
  EXPECT_EQ(SubmitCode(req), kInvalid);
  req = GoodSubmit();
  req.add_precisions("fp4");
  EXPECT_EQ(SubmitCode(req), kInvalid);
  req = GoodSubmit();
  *req.add_problems() = SeedProblem(128);  // duplicate
  EXPECT_EQ(SubmitCode(req), kInvalid);
  req = GoodSubmit();
  req.set_commit("abc 123");
  EXPECT_EQ(SubmitCode(req), kInvalid);
  req = GoodSubmit();
  v1::Problem huge = SeedProblem(65536, 128);  // valid shape, too large to tune
  huge.set_batch(64);
  *req.mutable_problems(0) = huge;
  EXPECT_EQ(SubmitCode(req), kInvalid);
  EXPECT_EQ(JobsInDb(), 0u);
  EXPECT_EQ(SubmitCode(GoodSubmit()), StatusCode::OK);
  EXPECT_EQ(JobsInDb(), 1u);
}

TEST_F(BadInputTest, GetJobListJobsListTrialsListRegressionsBounds) {
  const auto kInvalid = StatusCode::INVALID_ARGUMENT;
  v1::Job job;
  v1::GetJobRequest get;
  get.set_job_id(-1);
  EXPECT_EQ(stubs_.tuning->GetJob(Ctx().get(), get, &job).error_code(), kInvalid);
  get.set_job_id(0);
  EXPECT_EQ(stubs_.tuning->GetJob(Ctx().get(), get, &job).error_code(), kInvalid);
  get.set_job_id(424242);
  EXPECT_EQ(stubs_.tuning->GetJob(Ctx().get(), get, &job).error_code(), StatusCode::NOT_FOUND);

  v1::ListJobsResponse jobs;
  v1::ListJobsRequest list_jobs;
  list_jobs.set_state("bogus");
  EXPECT_EQ(stubs_.tuning->ListJobs(Ctx().get(), list_jobs, &jobs).error_code(), kInvalid);
  list_jobs.set_state("");
  list_jobs.set_limit(-1);
  EXPECT_EQ(stubs_.tuning->ListJobs(Ctx().get(), list_jobs, &jobs).error_code(), kInvalid);
  list_jobs.set_limit(5000);
  EXPECT_EQ(stubs_.tuning->ListJobs(Ctx().get(), list_jobs, &jobs).error_code(), kInvalid);

  v1::ListTrialsResponse trials;
  v1::ListTrialsRequest list_trials;
  EXPECT_EQ(stubs_.tuning->ListTrials(Ctx().get(), list_trials, &trials).error_code(), kInvalid);  // neither
  list_trials.set_run_id(-5);
  EXPECT_EQ(stubs_.tuning->ListTrials(Ctx().get(), list_trials, &trials).error_code(), kInvalid);
  list_trials.set_run_id(1);
  list_trials.set_limit(20000);
  EXPECT_EQ(stubs_.tuning->ListTrials(Ctx().get(), list_trials, &trials).error_code(), kInvalid);
  list_trials.set_run_id(0);
  list_trials.set_limit(0);
  list_trials.set_problem_key(KeyOf(SeedProblem(128)));
  list_trials.set_device_class("nope");
  EXPECT_EQ(stubs_.tuning->ListTrials(Ctx().get(), list_trials, &trials).error_code(), kInvalid);

  v1::ListRegressionsResponse regressions;
  v1::ListRegressionsRequest list_regressions;
  list_regressions.set_limit(-1);
  EXPECT_EQ(stubs_.tuning->ListRegressions(Ctx().get(), list_regressions, &regressions).error_code(), kInvalid);
  list_regressions.set_limit(0);
  list_regressions.set_commit(std::string(1000, 'a'));
  EXPECT_EQ(stubs_.tuning->ListRegressions(Ctx().get(), list_regressions, &regressions).error_code(), kInvalid);
  list_regressions.set_commit("");
  EXPECT_TRUE(stubs_.tuning->ListRegressions(Ctx().get(), list_regressions, &regressions).ok());
}

TEST_F(BadInputTest, RegisterWorkerValidatesIdsAndDevices) {
  auto code = [&](const v1::RegisterWorkerRequest& req) {
    v1::RegisterWorkerResponse resp;
    return stubs_.worker->RegisterWorker(Ctx().get(), req, &resp).error_code();
  };
  v1::RegisterWorkerRequest req;
  req.set_worker_id("w1");
  EXPECT_EQ(code(req), StatusCode::INVALID_ARGUMENT);  // no device
  *req.mutable_device() = CpuDevice();
  req.set_worker_id("");
  EXPECT_EQ(code(req), StatusCode::INVALID_ARGUMENT);
  req.set_worker_id("has space");
  EXPECT_EQ(code(req), StatusCode::INVALID_ARGUMENT);
  req.set_worker_id(std::string(200, 'w'));
  EXPECT_EQ(code(req), StatusCode::INVALID_ARGUMENT);
  req.set_worker_id("w1");
  req.mutable_device()->set_backend("tpu");
  EXPECT_EQ(code(req), StatusCode::INVALID_ARGUMENT);
  req.mutable_device()->set_backend("cpu");
  req.mutable_device()->set_sm_count(-4);
  EXPECT_EQ(code(req), StatusCode::INVALID_ARGUMENT);
  req.mutable_device()->set_sm_count(4);
  req.mutable_device()->set_device_class("cpu/bad class/x");
  EXPECT_EQ(code(req), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(WorkersInDb(), 0u);
  req.mutable_device()->clear_device_class();
  EXPECT_EQ(code(req), StatusCode::OK);
  EXPECT_EQ(WorkersInDb(), 1u);
}

TEST_F(BadInputTest, LeaseHeartbeatCompleteReleaseValidateIdsAndOwnership) {
  v1::LeaseJobResponse lease;
  v1::LeaseJobRequest lease_req;
  lease_req.set_worker_id("ghost");
  EXPECT_EQ(stubs_.worker->LeaseJob(Ctx().get(), lease_req, &lease).error_code(), StatusCode::FAILED_PRECONDITION);
  Register("w1");
  lease_req.set_worker_id("w1");
  lease_req.set_wait_ms(-1);
  EXPECT_EQ(stubs_.worker->LeaseJob(Ctx().get(), lease_req, &lease).error_code(), StatusCode::INVALID_ARGUMENT);
  lease_req.set_wait_ms(60000);
  EXPECT_EQ(stubs_.worker->LeaseJob(Ctx().get(), lease_req, &lease).error_code(), StatusCode::INVALID_ARGUMENT);
  lease_req.set_wait_ms(0);
  lease_req.set_device_class("tpu/x/y");
  EXPECT_EQ(stubs_.worker->LeaseJob(Ctx().get(), lease_req, &lease).error_code(), StatusCode::INVALID_ARGUMENT);
  lease_req.set_device_class("cuda/NVIDIA-H200/sm90");  // not the registered class
  EXPECT_EQ(stubs_.worker->LeaseJob(Ctx().get(), lease_req, &lease).error_code(), StatusCode::FAILED_PRECONDITION);

  v1::HeartbeatResponse hb;
  v1::HeartbeatRequest hb_req;
  hb_req.set_worker_id("w1");
  hb_req.set_job_id(-3);
  EXPECT_EQ(stubs_.worker->Heartbeat(Ctx().get(), hb_req, &hb).error_code(), StatusCode::INVALID_ARGUMENT);
  hb_req.set_worker_id("");
  hb_req.set_job_id(0);
  EXPECT_EQ(stubs_.worker->Heartbeat(Ctx().get(), hb_req, &hb).error_code(), StatusCode::INVALID_ARGUMENT);
  hb_req.set_worker_id("ghost");
  EXPECT_EQ(stubs_.worker->Heartbeat(Ctx().get(), hb_req, &hb).error_code(), StatusCode::FAILED_PRECONDITION);
  hb_req.set_worker_id("w1");
  hb_req.set_job_id(777);  // a job it does not hold
  ASSERT_TRUE(stubs_.worker->Heartbeat(Ctx().get(), hb_req, &hb).ok());
  EXPECT_FALSE(hb.lease_valid());

  v1::CompleteJobResponse done;
  v1::CompleteJobRequest complete;
  complete.set_worker_id("w1");
  complete.set_job_id(-1);
  EXPECT_EQ(stubs_.worker->CompleteJob(Ctx().get(), complete, &done).error_code(), StatusCode::INVALID_ARGUMENT);
  complete.set_job_id(999);
  EXPECT_EQ(stubs_.worker->CompleteJob(Ctx().get(), complete, &done).error_code(), StatusCode::NOT_FOUND);
  complete.set_error(std::string(10000, 'e'));
  EXPECT_EQ(stubs_.worker->CompleteJob(Ctx().get(), complete, &done).error_code(), StatusCode::INVALID_ARGUMENT);
  v1::SubmitTuningJobResponse submitted;
  ASSERT_TRUE(stubs_.tuning->SubmitTuningJob(Ctx().get(), GoodSubmit(), &submitted).ok());
  complete.set_error("");
  complete.set_job_id(submitted.job_id());  // queued, not leased by w1
  EXPECT_EQ(stubs_.worker->CompleteJob(Ctx().get(), complete, &done).error_code(), StatusCode::FAILED_PRECONDITION);

  v1::ReleaseJobResponse released;
  v1::ReleaseJobRequest release;
  release.set_worker_id("w1");
  release.set_job_id(0);
  EXPECT_EQ(stubs_.worker->ReleaseJob(Ctx().get(), release, &released).error_code(), StatusCode::INVALID_ARGUMENT);
  release.set_job_id(submitted.job_id());
  EXPECT_EQ(stubs_.worker->ReleaseJob(Ctx().get(), release, &released).error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(server_->store()->GetJob(submitted.job_id()).value().state, JobState::kQueued);
}

TEST_F(BadInputTest, ReportTrialsRejectsForgedMalformedAndForeignTrials) {
  Register("w1");
  Register("w2");
  v1::SubmitTuningJobResponse submitted;
  ASSERT_TRUE(stubs_.tuning->SubmitTuningJob(Ctx().get(), GoodSubmit(), &submitted).ok());
  v1::LeaseJobRequest lease_req;
  lease_req.set_worker_id("w1");
  v1::LeaseJobResponse lease;
  ASSERT_TRUE(stubs_.worker->LeaseJob(Ctx().get(), lease_req, &lease).ok());
  ASSERT_TRUE(lease.leased());
  const int64_t run = lease.job().run_id();
  const std::string key = KeyOf(SeedProblem(128));
  const v1::Trial good = MakeTrial(run, key, "fused/bm64/bs64/t1/fp32/st1", 10);
  v1::ReportTrialsResponse resp;

  // No worker id metadata; an unregistered one.
  {
    auto ctx = Ctx();
    auto writer = stubs_.worker->ReportTrials(ctx.get(), &resp);
    writer->Write(good);
    writer->WritesDone();
    EXPECT_EQ(writer->Finish().error_code(), StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_EQ(Report(stubs_, "ghost", {good}, &resp).error_code(), StatusCode::FAILED_PRECONDITION);
  // Another worker's job.
  EXPECT_EQ(Report(stubs_, "w2", {good}, &resp).error_code(), StatusCode::FAILED_PRECONDITION);
  // A run that does not exist, negative ids, forged trial ids, NaN and too many samples.
  EXPECT_EQ(Report(stubs_, "w1", {MakeTrial(run + 100, key, "fused/bm64/bs64/t1/fp32/st1", 10)}, &resp).error_code(),
            StatusCode::FAILED_PRECONDITION);
  v1::Trial bad = good;
  bad.set_run_id(-1);
  EXPECT_EQ(Report(stubs_, "w1", {bad}, &resp).error_code(), StatusCode::INVALID_ARGUMENT);
  bad = good;
  bad.set_trial_id("0123456789abcdef");
  EXPECT_EQ(Report(stubs_, "w1", {bad}, &resp).error_code(), StatusCode::INVALID_ARGUMENT);
  bad = good;
  bad.set_median_us(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(Report(stubs_, "w1", {bad}, &resp).error_code(), StatusCode::INVALID_ARGUMENT);
  bad = good;
  for (int i = 0; i < 1000; ++i) bad.add_samples_us(1.0);
  EXPECT_EQ(Report(stubs_, "w1", {bad}, &resp).error_code(), StatusCode::INVALID_ARGUMENT);
  // A problem the job does not contain.
  EXPECT_EQ(Report(stubs_, "w1", {MakeTrial(run, KeyOf(SeedProblem(256)), "fused/bm64/bs64/t1/fp32/st1", 10)}, &resp)
                .error_code(),
            StatusCode::INVALID_ARGUMENT);
  bad = good;
  bad.set_outcome("fantastic");
  EXPECT_EQ(Report(stubs_, "w1", {bad}, &resp).error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(server_->store()->ListTrials(run).value().empty());

  // More than 4096 trials in one stream.
  std::vector<v1::Trial> many;
  for (int i = 0; i < 4097; ++i) many.push_back(MakeTrial(run, key, "fused/bm64/bs64/t1/fp32/st1", 10,
                                       i % 1000));  // repeats are fine: the cap counts messages
  EXPECT_EQ(Report(stubs_, "w1", many, &resp).error_code(), StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(BadInputTest, MissingOrWrongTokenIsUnauthenticatedAndWritesNothing) {
  for (const std::string token : {std::string(), std::string("wrong-token"), std::string(kToken) + "x",
                                  std::string(kToken).substr(0, 10)}) {
    SCOPED_TRACE("token '" + token + "'");
    EXPECT_EQ(SubmitCode(GoodSubmit(), token), StatusCode::UNAUTHENTICATED);
    v1::RegisterWorkerRequest reg;
    reg.set_worker_id("intruder");
    *reg.mutable_device() = CpuDevice();
    v1::RegisterWorkerResponse reg_resp;
    EXPECT_EQ(stubs_.worker->RegisterWorker(Ctx(token).get(), reg, &reg_resp).error_code(), StatusCode::UNAUTHENTICATED);
    v1::LeaseJobRequest lease;
    lease.set_worker_id("intruder");
    v1::LeaseJobResponse lease_resp;
    EXPECT_EQ(stubs_.worker->LeaseJob(Ctx(token).get(), lease, &lease_resp).error_code(), StatusCode::UNAUTHENTICATED);
    v1::HeartbeatRequest hb;
    hb.set_worker_id("intruder");
    v1::HeartbeatResponse hb_resp;
    EXPECT_EQ(stubs_.worker->Heartbeat(Ctx(token).get(), hb, &hb_resp).error_code(), StatusCode::UNAUTHENTICATED);
    v1::ReportTrialsResponse report;
    EXPECT_EQ(Report(stubs_, "intruder", {MakeTrial(1, KeyOf(SeedProblem(128)), "fused/bm64/bs64/t1/fp32/st1", 1)},
                     &report, token)
                  .error_code(),
              StatusCode::UNAUTHENTICATED);
    v1::CompleteJobRequest complete;
    complete.set_worker_id("intruder");
    complete.set_job_id(1);
    v1::CompleteJobResponse complete_resp;
    EXPECT_EQ(stubs_.worker->CompleteJob(Ctx(token).get(), complete, &complete_resp).error_code(),
              StatusCode::UNAUTHENTICATED);
    v1::ReleaseJobRequest release;
    release.set_worker_id("intruder");
    release.set_job_id(1);
    v1::ReleaseJobResponse release_resp;
    EXPECT_EQ(stubs_.worker->ReleaseJob(Ctx(token).get(), release, &release_resp).error_code(),
              StatusCode::UNAUTHENTICATED);
    // Reads are guarded too unless the server was started with open reads.
    EXPECT_EQ(BestCode(SeedProblem(128), kCpuClass, token), StatusCode::UNAUTHENTICATED);
    v1::ListJobsResponse jobs;
    EXPECT_EQ(stubs_.tuning->ListJobs(Ctx(token).get(), v1::ListJobsRequest(), &jobs).error_code(),
              StatusCode::UNAUTHENTICATED);
    v1::ReportRegressionsResponse verdicts_resp;
    EXPECT_EQ(stubs_.tuning->ReportRegressions(Ctx(token).get(), v1::ReportRegressionsRequest(), &verdicts_resp)
                  .error_code(),
              StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(JobsInDb(), 0u);
  EXPECT_EQ(WorkersInDb(), 0u);
  // "Bearer" must be spelled out.
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->AddMetadata("authorization", kToken);
  v1::SubmitTuningJobResponse resp;
  EXPECT_EQ(stubs_.tuning->SubmitTuningJob(ctx.get(), GoodSubmit(), &resp).error_code(), StatusCode::UNAUTHENTICATED);
}

TEST_F(BadInputTest, OpenReadsServeWithoutTokenButWritesStillNeedIt) {
  Start(true);
  EXPECT_EQ(BestCode(SeedProblem(128), kCpuClass, ""), StatusCode::OK);
  v1::ListJobsResponse jobs;
  EXPECT_TRUE(stubs_.tuning->ListJobs(Ctx("").get(), v1::ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(SubmitCode(GoodSubmit(), ""), StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(JobsInDb(), 0u);
}

}  // namespace
}  // namespace fusetune::testing
