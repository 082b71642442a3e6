// The real Prometheus server (Debian's /usr/bin/prometheus) scrapes the tuning server's
// /metrics, and the series are read back through Prometheus's HTTP API (/api/v1/query).
//
// Prometheus is a test dependency installed by the setup script; when it is missing this
// test FAILS (it does not skip).

#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include "common/ports.h"
#include "common/subprocess.h"
#include "fusetune/wire/connection.h"
#include "fusetune/proto/fusetune.grpc.pb.h"
#include "fusetune/wire/convert.h"
#include "fusetune/service/server.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "prometheus_query.h"
#include "testing/http_get.h"

namespace fusetune::testing {
namespace {

constexpr char kToken[] = "prometheus-test-token";
constexpr char kClass[] = "cpu/Test-CPU/x86_64";

std::unique_ptr<grpc::ClientContext> Ctx(const std::string& worker_id = "") {
  auto ctx = std::make_unique<grpc::ClientContext>();
  AddBearerToken(*ctx, kToken);
  if (!worker_id.empty()) ctx->AddMetadata("x-fusetune-worker-id", worker_id);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  return ctx;
}

v1::Trial OkTrial(int64_t run, const std::string& problem, const std::string& config, double median) {
  v1::Trial t;
  t.set_run_id(run);
  t.set_problem_key(problem);
  t.set_config_key(config);
  t.set_trial_id(TrialId(run, problem, config, 0));
  t.set_outcome("ok");
  t.add_samples_us(median);
  t.set_median_us(median);
  t.set_p10_us(median);
  t.set_p90_us(median);
  t.set_max_rel_error(1.5e-6);
  return t;
}

// Runs one job through the server so that every kind of series has a value.
void TuneOneProblem(int port, const std::string& problem_key, const v1::Problem& problem) {
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  auto tuning = v1::TuningService::NewStub(channel);
  auto worker = v1::WorkerService::NewStub(channel);
  v1::RegisterWorkerRequest reg;
  reg.set_worker_id("prom-w1");
  reg.mutable_device()->set_backend("cpu");
  reg.mutable_device()->set_name("Test CPU");
  reg.mutable_device()->set_arch("x86_64");
  v1::RegisterWorkerResponse reg_resp;
  ASSERT_TRUE(worker->RegisterWorker(Ctx().get(), reg, &reg_resp).ok());
  v1::SubmitTuningJobRequest submit;
  *submit.add_problems() = problem;
  submit.set_device_class(kClass);
  submit.set_commit("prom");
  v1::SubmitTuningJobResponse submitted;
  ASSERT_TRUE(tuning->SubmitTuningJob(Ctx().get(), submit, &submitted).ok());
  v1::LeaseJobRequest lease_req;
  lease_req.set_worker_id("prom-w1");
  v1::LeaseJobResponse lease;
  ASSERT_TRUE(worker->LeaseJob(Ctx().get(), lease_req, &lease).ok());
  ASSERT_TRUE(lease.leased());
  v1::ReportTrialsResponse report;
  auto ctx = Ctx("prom-w1");
  auto writer = worker->ReportTrials(ctx.get(), &report);
  writer->Write(OkTrial(lease.job().run_id(), problem_key, "fused/bm64/bs64/t1/fp32/st1", 25));
  writer->Write(OkTrial(lease.job().run_id(), problem_key, "materialized/bm64/bs64/t1/fp32/st1", 100));
  writer->WritesDone();
  ASSERT_TRUE(writer->Finish().ok());
  v1::CompleteJobRequest complete;
  complete.set_worker_id("prom-w1");
  complete.set_job_id(submitted.job_id());
  complete.set_success(true);
  v1::CompleteJobResponse done;
  ASSERT_TRUE(worker->CompleteJob(Ctx().get(), complete, &done).ok());
  v1::GetBestConfigRequest best;
  *best.mutable_problem() = problem;
  best.set_device_class(kClass);
  v1::GetBestConfigResponse answer;
  ASSERT_TRUE(tuning->GetBestConfig(Ctx().get(), best, &answer).ok());
}

TEST(PrometheusScrape, ServerSeriesAreQueryableThroughPrometheus) {
  ASSERT_TRUE(std::filesystem::exists(kPrometheusBinary))
      << kPrometheusBinary << " is missing: install it with `apt-get install -y --no-install-recommends prometheus` "
      << "(the setup script does)";
  TempDir dir;
  ServerOptions options;
  options.db_path = dir.File("fusetune.db");
  options.token = kToken;
  options.metrics_address = "127.0.0.1:0";
  options.refresh_ms = 200;
  auto server = Server::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int metrics_port = (*server)->metrics_port();
  ASSERT_GT(metrics_port, 0);

  v1::Problem problem;
  problem.set_batch(1);
  problem.set_q_heads(12);
  problem.set_q_len(256);
  problem.set_kv_len(256);
  problem.set_head_dim(64);
  const std::string key = ProblemFromProto(problem).value().Key();
  TuneOneProblem((*server)->port(), key, problem);

  int prometheus_port = 0;
  std::unique_ptr<Subprocess> prometheus_process = StartPrometheus(dir, {{"fusetune", metrics_port}}, &prometheus_port);
  Subprocess& prometheus = *prometheus_process;
  ASSERT_TRUE(prometheus.started());

  // Wait for a successful scrape: up == 1 and the best-latency series present.
  const std::string labels = "{device_class=\"" + std::string(kClass) + "\",problem=\"" + key + "\"}";
  std::optional<double> up, latency;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    ASSERT_FALSE(prometheus.Poll().has_value()) << "prometheus exited:\n" << prometheus.Stderr();
    up = QueryScalar(prometheus_port, "up{job=\"fusetune\"}");
    latency = QueryScalar(prometheus_port, "fusetune_best_latency_seconds" + labels);
    if (up == 1.0 && latency.has_value()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ASSERT_EQ(up, 1.0) << "no successful scrape of 127.0.0.1:" << metrics_port << "\n" << prometheus.Stderr();
  ASSERT_TRUE(latency.has_value());
  EXPECT_DOUBLE_EQ(*latency, 25e-6);  // seconds
  EXPECT_EQ(QueryScalar(prometheus_port, "fusetune_best_speedup_vs_materialized" + labels), 4.0);
  EXPECT_EQ(QueryScalar(prometheus_port, "fusetune_best_max_rel_error" + labels), 1.5e-6);
  EXPECT_EQ(QueryScalar(prometheus_port, "fusetune_rpc_requests_total{method=\"CompleteJob\",code=\"OK\"}"), 1.0);
  EXPECT_EQ(QueryScalar(prometheus_port, "fusetune_trials_recorded_total"), 2.0);
  EXPECT_EQ(QueryScalar(prometheus_port, "fusetune_jobs{state=\"done\"}"), 1.0);
  EXPECT_EQ(QueryScalar(prometheus_port, "fusetune_workers_alive"), 1.0);
  // A histogram quantile over the latency buckets evaluates (the buckets are well formed).
  auto p99 = QueryScalar(prometheus_port,
                         "histogram_quantile(0.99, sum by (le) (fusetune_rpc_latency_seconds_bucket{method=\"GetBestConfig\"}))");
  ASSERT_TRUE(p99.has_value());
  EXPECT_GT(*p99, 0.0);
  EXPECT_LT(*p99, 30.0);

  prometheus.Signal(SIGTERM);
  EXPECT_TRUE(prometheus.Wait(20).has_value());
}

}  // namespace
}  // namespace fusetune::testing
