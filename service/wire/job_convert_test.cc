// Jobs, leases, regressions, workers and best-config answers across the wire (records_convert.h).
#include <limits>
#include <string>
#include <vector>

#include "fusetune/wire/records_convert.h"
#include "gtest/gtest.h"

namespace fusetune {
namespace {

v1::Problem SmallProblem(int q_len) {
  v1::Problem p;
  p.set_batch(1);
  p.set_q_heads(2);
  p.set_q_len(q_len);
  p.set_kv_len(q_len);
  p.set_head_dim(64);
  return p;
}

v1::SubmitTuningJobRequest Submission() {
  v1::SubmitTuningJobRequest req;
  *req.add_problems() = SmallProblem(16);
  *req.add_problems() = SmallProblem(32);
  req.set_device_class("cpu/test/x86_64");
  req.set_commit("abc123");
  req.set_max_trials(5);
  req.set_kind(v1::JOB_KIND_AUDIT);
  return req;
}

TEST(WireJobs, SubmissionBecomesAQueuedJobWhoseSpecIsTheRequest) {
  auto job = JobFromSubmitRequest(Submission());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state, JobState::kQueued);
  EXPECT_EQ(job->device_class, "cpu/test/x86_64");
  EXPECT_EQ(job->commit, "abc123");
  EXPECT_EQ(job->max_trials, 5);
  ASSERT_EQ(job->problem_keys.size(), 2u);
  EXPECT_EQ(job->problem_keys[0], "prefill/b1/hq2/hkv2/q16/k16/d64/causal0/fp32");
  auto spec = JobSpec(*job);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->problems_size(), 2);
  EXPECT_EQ(JobKindOf(*job), v1::JOB_KIND_AUDIT);
}

TEST(WireJobs, ASubmittedCommitIsStoredInCanonicalFormAndAnAbbreviationIsRefused) {
  v1::SubmitTuningJobRequest full = Submission();
  full.set_commit("0DDB43A4D977C3B1E0F2A9D8C7B6A5F4E3D2C1B0");
  auto job = JobFromSubmitRequest(full);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->commit, "0ddb43a4d977");
  v1::SubmitTuningJobRequest abbreviated = Submission();
  abbreviated.set_commit("0ddb43a");
  EXPECT_EQ(JobFromSubmitRequest(abbreviated).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(JobFromSubmitRequest(abbreviated).status().message().rfind("commit: ", 0), 0u);
}

TEST(WireJobs, SubmissionRefusalsNameTheField) {
  v1::SubmitTuningJobRequest duplicate = Submission();
  *duplicate.add_problems() = SmallProblem(16);
  EXPECT_EQ(JobFromSubmitRequest(duplicate).status().message(),
            "problems[2]: duplicate of prefill/b1/hq2/hkv2/q16/k16/d64/causal0/fp32");
  v1::SubmitTuningJobRequest none = Submission();
  none.clear_problems();
  EXPECT_EQ(JobFromSubmitRequest(none).status().message(), "problems: 1..256 per job, got 0");
  v1::SubmitTuningJobRequest variant = Submission();
  variant.add_variants("warp-speed");
  EXPECT_EQ(JobFromSubmitRequest(variant).status().message(), "variants: unknown variant 'warp-speed'");
  v1::SubmitTuningJobRequest budget = Submission();
  budget.set_max_seconds(-1);
  EXPECT_EQ(JobFromSubmitRequest(budget).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WireJobs, AJobWithAnUnreadableSpecIsATuneJob) {
  Job job;
  job.spec_json = "{not json";
  EXPECT_EQ(JobSpec(job).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(JobKindOf(job), v1::JOB_KIND_TUNE);
}

TEST(WireJobs, StateFilterIsEmptyOrAStateName) {
  EXPECT_EQ(*JobStateFilterFromProto(""), std::nullopt);
  EXPECT_EQ(*JobStateFilterFromProto("leased"), JobState::kLeased);
  auto bad = JobStateFilterFromProto("sleeping");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "state: unknown 'sleeping' (queued, leased, done, failed)");
}

TEST(WireJobs, LeaseCarriesTheJobItsSpecAndTheRecordedConfigs) {
  JobLease lease;
  lease.job = *JobFromSubmitRequest(Submission());
  lease.job.job_id = 7;
  lease.spec = *JobSpec(lease.job);
  lease.recorded_config_keys = {"fused/bm64/bs64/t1/fp32/st1", ""};
  v1::LeaseJobResponse resp;
  JobLeaseToProto(lease, &resp);
  EXPECT_TRUE(resp.leased());
  EXPECT_EQ(resp.job().job_id(), 7);
  EXPECT_EQ(resp.job().kind(), v1::JOB_KIND_AUDIT);
  EXPECT_EQ(resp.problems_size(), 2);
  EXPECT_EQ(resp.max_trials(), 5);
  ASSERT_EQ(resp.recorded_config_keys_size(), 2);
  EXPECT_EQ(resp.recorded_config_keys(1), "");
}

v1::RegisterWorkerRequest Registration() {
  v1::RegisterWorkerRequest req;
  req.set_worker_id("host-a:cpu0");
  req.set_host("host-a");
  v1::DeviceInfo* d = req.mutable_device();
  d->set_backend("cpu");
  d->set_name("Test CPU");
  d->set_arch("x86_64");
  d->set_device_index(3);
  return req;
}

v1::Regression Verdict(const std::string& commit) {
  v1::Regression r;
  r.set_commit(commit);
  r.set_baseline_commit("0123456789ab");
  r.set_device_class("cpu/test/x86_64");
  r.set_problem_key("prefill/b1/hq2/hkv2/q16/k16/d64/causal0/fp32");
  r.set_config_key("fused/bm64/bs64/t1/fp32/st1");
  r.set_metric("latency");
  r.set_ratio(1.07);
  r.set_p_value(0.001);
  r.set_verdict("regressed");
  r.set_created_unix_ms(1700000000000);
  return r;
}

TEST(WireRegressions, ReportedRowsReadBackAsSent) {
  v1::ReportRegressionsRequest req;
  *req.add_regressions() = Verdict("c1");
  *req.add_regressions() = Verdict("c2");
  auto rows = RegressionsFromReportRequest(req);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[1].commit, "c2");
  EXPECT_EQ((*rows)[0].baseline_commit, "0123456789ab");
  EXPECT_EQ((*rows)[0].ratio, 1.07);
  EXPECT_EQ((*rows)[0].p_value, 0.001);
  EXPECT_EQ((*rows)[0].verdict, "regressed");
  v1::Regression back;
  RegressionToProto((*rows)[0], &back);
  EXPECT_EQ(back.SerializeAsString(), req.regressions(0).SerializeAsString());
  EXPECT_TRUE(RegressionsFromReportRequest({})->empty());
}

TEST(WireRegressions, CommitsAreReceivedInCanonicalForm) {
  v1::ReportRegressionsRequest req;
  *req.add_regressions() = Verdict("0DDB43A4D977C3B1E0F2A9D8C7B6A5F4E3D2C1B0");
  req.mutable_regressions(0)->set_baseline_commit("0ddb43a4d977c3b1");
  auto rows = RegressionsFromReportRequest(req);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ((*rows)[0].commit, "0ddb43a4d977");
  EXPECT_EQ((*rows)[0].baseline_commit, "0ddb43a4d977");
}

TEST(WireRegressions, EachBadRowIsRefusedNamingItsIndexAndField) {
  struct Case {
    const char* field;  // expected in the message after "regressions[1]"
    void (*change)(v1::Regression&);
  };
  const Case cases[] = {
      {"commit", [](v1::Regression& r) { r.clear_commit(); }},
      {"baseline_commit", [](v1::Regression& r) { r.clear_baseline_commit(); }},
      {"baseline_commit", [](v1::Regression& r) { r.set_baseline_commit("has space"); }},
      {"baseline_commit", [](v1::Regression& r) { r.set_baseline_commit("0123456"); }},  // abbreviated
      {"device_class", [](v1::Regression& r) { r.clear_device_class(); }},
      {"device_class", [](v1::Regression& r) { r.set_device_class("not-a-class"); }},
      {"problem_key", [](v1::Regression& r) { r.clear_problem_key(); }},
      {"problem_key", [](v1::Regression& r) { r.set_problem_key(std::string(300, 'p')); }},
      {"config_key", [](v1::Regression& r) { r.clear_config_key(); }},
      {"metric", [](v1::Regression& r) { r.clear_metric(); }},
      {"verdict", [](v1::Regression& r) { r.set_verdict("worse"); }},
      {"ratio", [](v1::Regression& r) { r.set_ratio(std::numeric_limits<double>::quiet_NaN()); }},
      {"ratio", [](v1::Regression& r) { r.set_ratio(std::numeric_limits<double>::infinity()); }},
      {"p_value", [](v1::Regression& r) { r.set_p_value(1.5); }},
      {"p_value", [](v1::Regression& r) { r.set_p_value(-0.01); }},
      {"p_value", [](v1::Regression& r) { r.set_p_value(std::numeric_limits<double>::quiet_NaN()); }},
      {"created_unix_ms", [](v1::Regression& r) { r.set_created_unix_ms(-1); }},
  };
  for (const Case& c : cases) {
    v1::ReportRegressionsRequest req;
    *req.add_regressions() = Verdict("c1");
    c.change(*req.add_regressions() = Verdict("c2"));
    auto rows = RegressionsFromReportRequest(req);
    ASSERT_EQ(rows.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    const std::string message(rows.status().message());
    EXPECT_EQ(message.rfind("regressions[1]", 0), 0u) << message;
    EXPECT_NE(message.find(c.field), std::string::npos) << c.field << " not in: " << message;
  }
}

TEST(WireRegressions, TooManyRowsInOneReportAreRefused) {
  v1::ReportRegressionsRequest req;
  for (int i = 0; i <= kMaxReportedRegressions; ++i) *req.add_regressions() = Verdict("c");
  EXPECT_EQ(RegressionsFromReportRequest(req).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WireWorkers, RegistrationDerivesTheDeviceClassAndStoresTheDevice) {
  auto worker = WorkerFromRegisterRequest(Registration());
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_EQ(worker->worker_id, "host-a:cpu0");
  EXPECT_EQ(worker->backend, "cpu");
  EXPECT_EQ(worker->device_class, "cpu/Test-CPU/x86_64");
  auto device = WorkerDevice(*worker);
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ(device->name, "Test CPU");
  EXPECT_EQ(device->device_index, 3);
}

TEST(WireWorkers, RegistrationRefusalsNameTheField) {
  v1::RegisterWorkerRequest no_device = Registration();
  no_device.clear_device();
  EXPECT_EQ(WorkerFromRegisterRequest(no_device).status().message(), "device: required");
  v1::RegisterWorkerRequest bad_id = Registration();
  bad_id.set_worker_id("has space");
  EXPECT_EQ(WorkerFromRegisterRequest(bad_id).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WireWorkers, StatusReportsTheEarliestLeaseExpiry) {
  WorkerRecord w = *WorkerFromRegisterRequest(Registration());
  Job a, b;
  a.job_id = 1;
  a.lease_expiry_unix_ms = 900;
  b.job_id = 2;
  b.lease_expiry_unix_ms = 500;
  std::vector<const Job*> held = {&a, &b};
  v1::WorkerStatus status;
  WorkerStatusToProto(w, true, held, &status);
  EXPECT_TRUE(status.alive());
  EXPECT_EQ(status.device_name(), "Test CPU");
  EXPECT_EQ(status.device_index(), 3);
  ASSERT_EQ(status.leased_job_ids_size(), 2);
  EXPECT_EQ(status.lease_expiry_unix_ms(), 500);
}

TEST(WireAnswers, AnswerCarriesProvenanceConfigAndSource) {
  BestConfigAnswer answer;
  answer.provenance = ConfigProvenance::kNearest;
  answer.config = *KernelConfig::FromKey("fused/bm64/bs64/t1/fp32/st1");
  answer.problem_key = "requested";
  answer.distance = 2;
  answer.source.problem_key = "tuned";
  answer.source.median_us = 12.5;
  answer.source.run_id = 4;
  v1::GetBestConfigResponse resp;
  BestConfigAnswerToProto(answer, &resp);
  EXPECT_EQ(resp.provenance(), v1::GetBestConfigResponse::NEAREST);
  EXPECT_EQ(resp.config().key(), "fused/bm64/bs64/t1/fp32/st1");
  EXPECT_EQ(resp.problem_key(), "requested");
  EXPECT_EQ(resp.source_problem_key(), "tuned");
  EXPECT_DOUBLE_EQ(resp.distance(), 2);
  EXPECT_DOUBLE_EQ(resp.median_us(), 12.5);
  EXPECT_EQ(resp.run_id(), 4);
}

TEST(WireAnswers, AReceivedAnswerReadsBackAsSent) {
  BestConfigAnswer sent;
  sent.provenance = ConfigProvenance::kNearest;
  sent.config = *KernelConfig::FromKey("fused/bm64/bs64/t1/fp32/st1");
  sent.problem_key = "requested";
  sent.distance = 2;
  sent.source.problem_key = "tuned";
  sent.source.median_us = 12.5;
  sent.source.speedup_vs_materialized = 1.75;
  sent.source.max_rel_error = 3e-4;
  sent.source.run_id = 4;
  sent.source.commit = "0123456789ab";
  v1::GetBestConfigResponse resp;
  BestConfigAnswerToProto(sent, &resp);
  absl::StatusOr<BestConfigAnswer> got = BestConfigAnswerFromProto(resp);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->provenance, ConfigProvenance::kNearest);
  EXPECT_EQ(got->config.Key(), "fused/bm64/bs64/t1/fp32/st1");
  EXPECT_EQ(got->problem_key, "requested");
  EXPECT_DOUBLE_EQ(got->distance, 2);
  EXPECT_EQ(got->source.problem_key, "tuned");
  EXPECT_EQ(got->source.config_key, "fused/bm64/bs64/t1/fp32/st1");
  EXPECT_DOUBLE_EQ(got->source.median_us, 12.5);
  EXPECT_DOUBLE_EQ(got->source.speedup_vs_materialized, 1.75);
  EXPECT_DOUBLE_EQ(got->source.max_rel_error, 3e-4);
  EXPECT_EQ(got->source.run_id, 4);
  EXPECT_EQ(got->source.commit, "0123456789ab");
}

TEST(WireAnswers, AReceivedAnswerWithoutAConfigIsRefusedNamingIt) {
  v1::GetBestConfigResponse resp;
  resp.mutable_config()->set_key("not-a-config");
  absl::StatusOr<BestConfigAnswer> got = BestConfigAnswerFromProto(resp);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find("config"), std::string_view::npos) << got.status();
}

}  // namespace
}  // namespace fusetune
