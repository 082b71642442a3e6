// Audit jobs through the server: submit with kind audit, the lease carries the recorded
// best configs, ReportAudit stores the summary, ListAudits lists it, and completion leaves
// the best configs alone. Real gRPC on 127.0.0.1 over a real SQLite file.
#include <cmath>
#include <limits>

#include "fusetune/wire/connection.h"
#include "fusetune/db/store.h"
#include "server_test_util.h"

namespace fusetune::testing {
namespace {

constexpr char kRecorded[] = "fused/bm64/bs64/t1/fp32/st1";
constexpr char kFaster[] = "fused/bm32/bs32/t1/fp32/st1";

class ServerAuditTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.metrics_address.clear();
    options.db_path = dir_.File("fusetune.db");
    options.token = kToken;
    options.refresh_ms = 100;
    auto server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stubs_ = Connect(server_->port());
  }

  // A best config recorded for `problem` on the test CPU class, as a finished tune left it.
  void RecordBest(const v1::Problem& problem, const std::string& config) {
    RunInfo run;
    run.commit = "tuned";
    run.device.backend = "cpu";
    run.label = "seed";
    auto id = server_->store()->BeginRun(run);
    ASSERT_TRUE(id.ok()) << id.status();
    BestConfig b;
    b.device_class = kCpuClass;
    b.problem_key = KeyOf(problem);
    b.config_key = config;
    b.median_us = 50;
    b.run_id = *id;
    b.commit = "tuned";
    ASSERT_TRUE(server_->store()->UpsertBestConfig(b).ok());
  }

  int64_t Submit(const std::vector<v1::Problem>& problems, v1::JobKind kind) {
    v1::SubmitTuningJobRequest req;
    for (const auto& p : problems) *req.add_problems() = p;
    req.set_device_class(kCpuClass);
    req.set_commit("abc123");
    req.set_kind(kind);
    v1::SubmitTuningJobResponse resp;
    grpc::Status s = stubs_.tuning->SubmitTuningJob(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job_id();
  }

  v1::LeaseJobResponse Lease(const std::string& worker_id) {
    v1::LeaseJobRequest req;
    req.set_worker_id(worker_id);
    req.set_device_class(kCpuClass);
    v1::LeaseJobResponse resp;
    grpc::Status s = stubs_.worker->LeaseJob(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  // An audit job of SeedProblem(256) leased by "w1": its job id and run.
  std::pair<int64_t, int64_t> LeasedAuditJob() {
    RecordBest(SeedProblem(256), kRecorded);
    EXPECT_TRUE(RegisterCpuWorker(stubs_, "w1").ok());
    const int64_t job_id = Submit({SeedProblem(256)}, v1::JOB_KIND_AUDIT);
    v1::LeaseJobResponse lease = Lease("w1");
    EXPECT_TRUE(lease.leased());
    return {job_id, lease.job().run_id()};
  }

  static v1::AuditSummary Summary(const std::string& problem_key) {
    v1::AuditSummary a;
    a.set_problem_key(problem_key);
    a.set_recorded_config_key(kRecorded);
    a.set_best_config_key(kFaster);
    a.set_recorded_us(52);
    a.set_best_us(40);
    a.set_regret(0.3);
    a.set_regret_low(0.25);
    a.set_regret_high(0.35);
    a.set_rounds(15);
    a.set_configs_measured(12);
    a.set_configs_failed(1);
    return a;
  }

  grpc::Status ReportAudit(const std::string& worker_id, int64_t job_id, const v1::AuditSummary& audit,
                           v1::ReportAuditResponse* resp, grpc::ClientContext* ctx = nullptr) {
    v1::ReportAuditRequest req;
    req.set_worker_id(worker_id);
    req.set_job_id(job_id);
    *req.mutable_audit() = audit;
    auto own = Ctx();
    return stubs_.worker->ReportAudit(ctx != nullptr ? ctx : own.get(), req, resp);
  }

  v1::ListAuditsResponse ListAudits(const std::string& device_class = "", const std::string& problem_key = "") {
    v1::ListAuditsRequest req;
    req.set_device_class(device_class);
    req.set_problem_key(problem_key);
    v1::ListAuditsResponse resp;
    grpc::Status s = stubs_.tuning->ListAudits(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  ScratchDir dir_;
  std::unique_ptr<Server> server_;
  Stubs stubs_;
};

TEST_F(ServerAuditTest, AuditJobCarriesRecordedConfigsAndItsReportIsListed) {
  const v1::Problem tuned = SeedProblem(256), untuned = SeedProblem(512);
  RecordBest(tuned, kRecorded);
  ASSERT_TRUE(RegisterCpuWorker(stubs_, "w1").ok());
  const int64_t job_id = Submit({tuned, untuned}, v1::JOB_KIND_AUDIT);
  ASSERT_GT(job_id, 0);
  EXPECT_EQ(GetJobOrFail(stubs_, job_id).kind(), v1::JOB_KIND_AUDIT);

  v1::LeaseJobResponse lease = Lease("w1");
  ASSERT_TRUE(lease.leased());
  EXPECT_EQ(lease.job().kind(), v1::JOB_KIND_AUDIT);
  // One entry per problem, in order; "" where nothing is recorded.
  ASSERT_EQ(lease.recorded_config_keys_size(), 2);
  EXPECT_EQ(lease.recorded_config_keys(0), kRecorded);
  EXPECT_EQ(lease.recorded_config_keys(1), "");
  const int64_t run = lease.job().run_id();

  // Audit trials (stage audit) upload like sweep trials; a faster config among them.
  v1::Trial faster = MakeTrial(run, KeyOf(tuned), kFaster, 40, 1);
  faster.set_stage(v1::TRIAL_STAGE_AUDIT);
  faster.set_trial_id(TrialId(run, KeyOf(tuned), kFaster, 1, TrialStage::kAudit));
  v1::Trial recorded = MakeTrial(run, KeyOf(tuned), kRecorded, 52, 1);
  recorded.set_stage(v1::TRIAL_STAGE_AUDIT);
  recorded.clear_trial_id();  // the server derives it, stage included
  v1::ReportTrialsResponse report;
  ASSERT_TRUE(Report(stubs_, "w1", {faster, recorded}, &report).ok());
  EXPECT_EQ(report.inserted(), 2);

  v1::ReportAuditResponse stored;
  grpc::Status st = ReportAudit("w1", job_id, Summary(KeyOf(tuned)), &stored);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_GT(stored.audit_id(), 0);
  // A retry (the reply was lost) answers the same audit instead of storing a second one.
  v1::ReportAuditResponse again;
  ASSERT_TRUE(ReportAudit("w1", job_id, Summary(KeyOf(tuned)), &again).ok());
  EXPECT_EQ(again.audit_id(), stored.audit_id());

  v1::ListAuditsResponse all = ListAudits();
  ASSERT_EQ(all.audits_size(), 1);
  const v1::AuditSummary& a = all.audits(0);
  EXPECT_EQ(a.audit_id(), stored.audit_id());
  EXPECT_EQ(a.run_id(), run);                 // filled from the job
  EXPECT_EQ(a.device_class(), kCpuClass);     // filled from the job
  EXPECT_EQ(a.commit(), "abc123");            // filled from the job
  EXPECT_GT(a.created_unix_ms(), 0);          // the server's clock
  EXPECT_EQ(a.problem_key(), KeyOf(tuned));
  EXPECT_EQ(a.best_config_key(), kFaster);
  EXPECT_DOUBLE_EQ(a.regret(), 0.3);
  EXPECT_EQ(a.rounds(), 15);
  EXPECT_EQ(ListAudits(kCpuClass, KeyOf(tuned)).audits_size(), 1);
  EXPECT_EQ(ListAudits("", KeyOf(untuned)).audits_size(), 0);
  EXPECT_EQ(ListAudits("cuda/NVIDIA-H200/sm90").audits_size(), 0);

  // Completing an audit job leaves the recorded best config as it was, although the
  // audit's trials hold a faster one.
  ASSERT_TRUE(CompleteJob(stubs_, "w1", job_id, false).ok());
  auto best = server_->store()->GetBestConfig(kCpuClass, KeyOf(tuned));
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->config_key, kRecorded);
  EXPECT_FALSE(server_->store()->GetBestConfig(kCpuClass, KeyOf(untuned)).ok());
}

TEST_F(ServerAuditTest, SuccessfulAuditJobDoesNotRecomputeBestConfigs) {
  auto [job_id, run] = LeasedAuditJob();
  v1::Trial faster = MakeTrial(run, KeyOf(SeedProblem(256)), kFaster, 10, 1);
  faster.set_stage(v1::TRIAL_STAGE_AUDIT);
  faster.clear_trial_id();
  v1::ReportTrialsResponse report;
  ASSERT_TRUE(Report(stubs_, "w1", {faster}, &report).ok());
  ASSERT_TRUE(CompleteJob(stubs_, "w1", job_id, true).ok());
  EXPECT_EQ(GetJobOrFail(stubs_, job_id).state(), "done");
  auto best = server_->store()->GetBestConfig(kCpuClass, KeyOf(SeedProblem(256)));
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->config_key, kRecorded);
}

TEST_F(ServerAuditTest, ReportAuditRefusesMalformedSummaries) {
  auto [job_id, run] = LeasedAuditJob();
  const std::string key = KeyOf(SeedProblem(256));
  auto code = [&](auto edit) {
    v1::AuditSummary a = Summary(key);
    edit(a);
    v1::ReportAuditResponse resp;
    return ReportAudit("w1", job_id, a, &resp).error_code();
  };
  const auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
  EXPECT_EQ(code([](v1::AuditSummary& a) { a.set_regret(std::nan("")); }), kInvalid);
  EXPECT_EQ(code([](v1::AuditSummary& a) { a.set_best_us(-1); }), kInvalid);
  EXPECT_EQ(code([](v1::AuditSummary& a) { a.set_best_config_key("fused/garbage"); }), kInvalid);
  EXPECT_EQ(code([](v1::AuditSummary& a) { a.set_rounds(0); }), kInvalid);
  EXPECT_EQ(code([&](v1::AuditSummary& a) { a.set_problem_key(KeyOf(SeedProblem(1024))); }), kInvalid);
  EXPECT_EQ(code([&](v1::AuditSummary& a) { a.set_run_id(run + 1); }), kInvalid);
  EXPECT_EQ(code([](v1::AuditSummary& a) { a.set_device_class("cuda/NVIDIA-H200/sm90"); }), kInvalid);
  EXPECT_EQ(code([](v1::AuditSummary& a) { a.set_commit("other"); }), kInvalid);
  // No summary at all.
  v1::ReportAuditRequest empty;
  empty.set_worker_id("w1");
  empty.set_job_id(job_id);
  v1::ReportAuditResponse resp;
  EXPECT_EQ(stubs_.worker->ReportAudit(Ctx().get(), empty, &resp).error_code(), kInvalid);
  // Nothing of it was stored.
  EXPECT_EQ(ListAudits().audits_size(), 0);
}

TEST_F(ServerAuditTest, ReportAuditRefusesUnknownJobsAndWorkersNotHoldingTheLease) {
  auto [job_id, run] = LeasedAuditJob();
  (void)run;
  const v1::AuditSummary summary = Summary(KeyOf(SeedProblem(256)));
  v1::ReportAuditResponse resp;
  EXPECT_EQ(ReportAudit("w1", job_id + 100, summary, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ReportAudit("w1", 0, summary, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(RegisterCpuWorker(stubs_, "w2").ok());
  EXPECT_EQ(ReportAudit("w2", job_id, summary, &resp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // An unregistered worker is told so, with the machine-readable reason.
  grpc::ClientContext ctx;
  AddBearerToken(ctx, kToken);
  EXPECT_EQ(ReportAudit("ghost", job_id, summary, &resp, &ctx).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  auto reason = ctx.GetServerTrailingMetadata().find(kErrorReasonMetadata);
  ASSERT_NE(reason, ctx.GetServerTrailingMetadata().end());
  EXPECT_EQ(std::string(reason->second.data(), reason->second.size()), kReasonWorkerNotRegistered);
  // The token is required.
  grpc::ClientContext anonymous;
  EXPECT_EQ(ReportAudit("w1", job_id, summary, &resp, &anonymous).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // After completion the lease is gone.
  ASSERT_TRUE(CompleteJob(stubs_, "w1", job_id, true).ok());
  EXPECT_EQ(ReportAudit("w1", job_id, summary, &resp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ListAudits().audits_size(), 0);
}

TEST_F(ServerAuditTest, ReportAuditRefusesTuneJobs) {
  ASSERT_TRUE(RegisterCpuWorker(stubs_, "w1").ok());
  const int64_t job_id = Submit({SeedProblem(256)}, v1::JOB_KIND_TUNE);
  v1::LeaseJobResponse lease = Lease("w1");
  ASSERT_TRUE(lease.leased());
  EXPECT_EQ(lease.job().kind(), v1::JOB_KIND_TUNE);
  EXPECT_EQ(lease.recorded_config_keys_size(), 0);
  v1::ReportAuditResponse resp;
  EXPECT_EQ(ReportAudit("w1", job_id, Summary(KeyOf(SeedProblem(256))), &resp).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ServerAuditTest, SubmitDefaultsToTuneAndRefusesUnknownKinds) {
  const int64_t job_id = Submit({SeedProblem(256)}, v1::JOB_KIND_TUNE);
  EXPECT_EQ(GetJobOrFail(stubs_, job_id).kind(), v1::JOB_KIND_TUNE);
  v1::SubmitTuningJobRequest req;
  *req.add_problems() = SeedProblem(256);
  req.set_device_class(kCpuClass);
  req.set_kind(static_cast<v1::JobKind>(7));
  v1::SubmitTuningJobResponse resp;
  EXPECT_EQ(stubs_.tuning->SubmitTuningJob(Ctx().get(), req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServerAuditTest, ListAuditsRefusesMalformedFilters) {
  auto code = [&](auto edit) {
    v1::ListAuditsRequest req;
    edit(req);
    v1::ListAuditsResponse resp;
    return stubs_.tuning->ListAudits(Ctx().get(), req, &resp).error_code();
  };
  EXPECT_EQ(code([](v1::ListAuditsRequest& r) { r.set_device_class("tpu/v5/x"); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code([](v1::ListAuditsRequest& r) { r.set_limit(-1); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code([](v1::ListAuditsRequest& r) { r.set_limit(1001); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code([](v1::ListAuditsRequest& r) { r.set_problem_key(std::string(kMaxKeyLength + 1, 'p')); }),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code([](v1::ListAuditsRequest&) {}), grpc::StatusCode::OK);
  // Reads need the token (this server does not run with open reads).
  v1::ListAuditsRequest req;
  v1::ListAuditsResponse resp;
  grpc::ClientContext anonymous;
  EXPECT_EQ(stubs_.tuning->ListAudits(&anonymous, req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace fusetune::testing
