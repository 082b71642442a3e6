// Test fixture pieces shared by the server tests: a temporary database, a running Server,
// stubs with the token in their metadata, and trial builders. Internal to tests.
#ifndef FUSETUNE_SERVICE_SERVER_SERVER_TEST_UTIL_H_
#define FUSETUNE_SERVICE_SERVER_SERVER_TEST_UTIL_H_

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "fusetune/wire/connection.h"
#include "fusetune/proto/fusetune.grpc.pb.h"
#include "fusetune/wire/convert.h"
#include "fusetune/wire/status.h"
#include "fusetune/service/server.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace fusetune::testing {

inline constexpr char kToken[] = "test-token-0123456789abcdef";
inline constexpr char kCpuClass[] = "cpu/Test-CPU/x86_64";

// A fresh temporary directory, removed when the object dies.
class ScratchDir {
 public:
  ScratchDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "fusetune-server-XXXXXX").string();
    path_ = ::mkdtemp(templ.data()) != nullptr ? templ : "";
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token = kToken,
                                                const std::string& worker_id = "") {
  auto ctx = std::make_unique<grpc::ClientContext>();
  AddBearerToken(*ctx, token);
  if (!worker_id.empty()) ctx->AddMetadata("x-fusetune-worker-id", worker_id);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return ctx;
}

struct Stubs {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::TuningService::Stub> tuning;
  std::unique_ptr<v1::WorkerService::Stub> worker;
};

inline Stubs Connect(int port) {
  Stubs s;
  s.channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  s.tuning = v1::TuningService::NewStub(s.channel);
  s.worker = v1::WorkerService::NewStub(s.channel);
  return s;
}

inline v1::Problem SeedProblem(int seq_len, int head_dim = 64) {
  v1::Problem p;
  p.set_batch(1);
  p.set_q_heads(12);
  p.set_kv_heads(12);
  p.set_q_len(seq_len);
  p.set_kv_len(seq_len);
  p.set_head_dim(head_dim);
  p.set_dtype("fp32");
  return p;
}

inline std::string KeyOf(const v1::Problem& p) { return ProblemFromProto(p).value().Key(); }

inline v1::DeviceInfo CpuDevice() {
  v1::DeviceInfo d;
  d.set_backend("cpu");
  d.set_name("Test CPU");
  d.set_arch("x86_64");
  d.set_sm_count(2);
  return d;
}

// RegisterWorker of `worker_id` with a CPU device.
inline grpc::Status RegisterCpuWorker(const Stubs& s, const std::string& worker_id,
                                      const std::string& host = "test-host") {
  v1::RegisterWorkerRequest req;
  req.set_worker_id(worker_id);
  req.set_host(host);
  *req.mutable_device() = CpuDevice();
  v1::RegisterWorkerResponse resp;
  return s.worker->RegisterWorker(Ctx().get(), req, &resp);
}

// CompleteJob of `job_id` by `worker_id`.
inline grpc::Status CompleteJob(const Stubs& s, const std::string& worker_id, int64_t job_id, bool success = true) {
  v1::CompleteJobRequest req;
  req.set_worker_id(worker_id);
  req.set_job_id(job_id);
  req.set_success(success);
  v1::CompleteJobResponse resp;
  return s.worker->CompleteJob(Ctx().get(), req, &resp);
}

// GetJob of `job_id` (a failed call is a test failure and returns an empty Job).
inline v1::Job GetJobOrFail(const Stubs& s, int64_t job_id) {
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  v1::Job job;
  grpc::Status st = s.tuning->GetJob(Ctx().get(), req, &job);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return job;
}

// An ok trial with three samples around `median_us`.
inline v1::Trial MakeTrial(int64_t run_id, const std::string& problem_key, const std::string& config_key,
                           double median_us, int attempt = 0) {
  v1::Trial t;
  t.set_run_id(run_id);
  t.set_problem_key(problem_key);
  t.set_config_key(config_key);
  t.set_attempt(attempt);
  t.set_trial_id(TrialId(run_id, problem_key, config_key, attempt));
  t.set_outcome("ok");
  t.add_samples_us(median_us * 0.99);
  t.add_samples_us(median_us);
  t.add_samples_us(median_us * 1.01);
  t.set_median_us(median_us);
  t.set_p10_us(median_us * 0.99);
  t.set_p90_us(median_us * 1.01);
  t.set_max_abs_error(1e-6);
  t.set_max_rel_error(2e-6);
  t.set_checked_elements(1000);
  return t;
}

// Streams `trials` as worker `worker_id`.
inline grpc::Status Report(const Stubs& s, const std::string& worker_id, const std::vector<v1::Trial>& trials,
                           v1::ReportTrialsResponse* resp, const std::string& token = kToken) {
  auto ctx = Ctx(token, worker_id);
  auto writer = s.worker->ReportTrials(ctx.get(), resp);
  for (const auto& t : trials) {
    if (!writer->Write(t)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

}  // namespace fusetune::testing

#endif  // FUSETUNE_SERVICE_SERVER_SERVER_TEST_UTIL_H_
