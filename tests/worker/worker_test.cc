// Worker daemon tests in one process: a real Server (gRPC on 127.0.0.1, SQLite in a temp
// file) and a Worker whose devices are CPU backends, some of them made to fail or hang
// through WorkerOptions::backend_factory.
#include "fusetune/wire/connection.h"
#include "fusetune/worker/worker.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "fusetune/kernels/cpu_backend.h"
#include "fusetune/worker/spool.h"
#include "fusetune/proto/fusetune.grpc.pb.h"
#include "fusetune/wire/convert.h"
#include "fusetune/service/server.h"
#include "grpcpp/grpcpp.h"

namespace fusetune {
namespace {

constexpr char kToken[] = "worker-test-token";

size_t CountStage(const std::vector<Trial>& trials, TrialStage stage) {
  size_t n = 0;
  for (const Trial& t : trials) n += t.stage == stage;
  return n;
}

// A CPU backend whose kernels fail (like a GPU after a sticky error) or hang.
class BrokenBackend : public Backend {
 public:
  enum class Mode { kError, kHang };
  BrokenBackend(Mode mode, std::atomic<bool>* release) : inner_(CreateCpuBackend()), mode_(mode), release_(release) {}
  DeviceInfo Describe() const override { return inner_->Describe(); }
  std::vector<KernelConfig> CandidateConfigs(const AttentionProblem& p) const override {
    return inner_->CandidateConfigs(p);
  }
  absl::Status CanImplement(const AttentionProblem& p, const KernelConfig& c) const override {
    return inner_->CanImplement(p, c);
  }
  absl::Status Run(const AttentionProblem&, const KernelConfig&, const AttentionBuffers&) override {
    if (mode_ == Mode::kHang) {
      while (!release_->load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return absl::InternalError("an illegal memory access was encountered");
  }
  absl::StatusOr<TimingSamples> Time(const AttentionProblem&, const KernelConfig&, const AttentionBuffers&,
                                     const TimingOptions&) override {
    return absl::InternalError("an illegal memory access was encountered");
  }
  absl::StatusOr<DeviceMemory> Allocate(size_t bytes) override { return inner_->Allocate(bytes); }
  absl::Status CopyToDevice(void* d, const void* s, size_t n) override { return inner_->CopyToDevice(d, s, n); }
  absl::Status CopyToHost(void* d, const void* s, size_t n) override { return inner_->CopyToHost(d, s, n); }
  absl::Status Fill(void* d, uint8_t v, size_t n) override { return inner_->Fill(d, v, n); }

 private:
  std::unique_ptr<Backend> inner_;
  Mode mode_;
  std::atomic<bool>* release_;
};

class WorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("worker_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    ServerOptions o;
    o.db_path = (dir_ / "db.sqlite").string();
    o.token = kToken;
    o.open_reads = true;
    o.metrics_address = "";
    o.lease_ms = 3000;
    o.heartbeat_ms = 200;
    o.refresh_ms = 100;
    auto server = Server::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    address_ = "127.0.0.1:" + std::to_string(server_->port());
    stub_ = v1::TuningService::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
    device_class_ = CreateCpuBackend()->Describe().DeviceClass();
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  static AttentionProblem Problem(int len) {
    AttentionProblem p;
    p.batch = 1;
    p.q_heads = 2;
    p.kv_heads = 2;
    p.q_len = len;
    p.kv_len = len;
    p.head_dim = 32;
    return p;
  }

  int64_t Submit(int len, int max_trials) { return Submit(std::vector<int>{len}, max_trials, v1::JOB_KIND_TUNE); }
  int64_t Submit(const std::vector<int>& lens, int max_trials, v1::JobKind kind) {
    v1::SubmitTuningJobRequest req;
    for (int len : lens) ProblemToProto(Problem(len), req.add_problems());
    req.set_device_class(device_class_);
    req.set_max_trials(max_trials);
    req.set_kind(kind);
    req.add_variants("fused");
    v1::SubmitTuningJobResponse resp;
    grpc::ClientContext ctx;
    AddBearerToken(ctx, kToken);
    grpc::Status st = stub_->SubmitTuningJob(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.job_id();
  }

  WorkerOptions Options(std::function<absl::StatusOr<std::unique_ptr<Backend>>(int)> factory) {
    WorkerOptions o;
    o.server = address_;
    o.token = kToken;
    o.spool_dir = (dir_ / "spool").string();
    o.worker_id = "wt";
    o.cpu_devices = 2;
    o.lease_wait_ms = 200;
    o.backoff = {.initial_ms = 20, .max_ms = 200, .multiplier = 2.0, .jitter = 0.5};
    o.device_retry = absl::Seconds(30);  // the broken device stays out for the whole test
    o.backend_factory = std::move(factory);
    o.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    return o;
  }

  std::filesystem::path dir_;
  std::unique_ptr<Server> server_;
  std::string address_;
  std::string device_class_;
  std::unique_ptr<v1::TuningService::Stub> stub_;
};

// Runs the worker on a thread; stops it after `seconds` if it has not finished.
absl::Status RunWithDeadline(Worker& worker, double seconds) {
  absl::Status result;
  std::atomic<bool> done{false};
  std::thread t([&] {
    result = worker.Run();
    done = true;
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (!done) worker.RequestStop();
  t.join();
  return done ? result : absl::DeadlineExceededError("worker did not finish in time");
}

TEST_F(WorkerTest, FailingDeviceReleasesItsJobAndTheHealthyDeviceFinishesBoth) {
  const int64_t job1 = Submit(64, 3);
  const int64_t job2 = Submit(72, 3);
  std::atomic<bool> unused{true};
  WorkerOptions o = Options([&](int index) -> absl::StatusOr<std::unique_ptr<Backend>> {
    if (index == 1) return std::make_unique<BrokenBackend>(BrokenBackend::Mode::kError, &unused);
    return CreateCpuBackend();
  });
  o.max_jobs = 2;
  auto worker = Worker::Create(o);
  ASSERT_TRUE(worker.ok()) << worker.status();
  ASSERT_TRUE(RunWithDeadline(**worker, 60).ok());
  WorkerStats s = (*worker)->stats();
  EXPECT_EQ(s.jobs_completed, 2);
  EXPECT_GE(s.device_failures, 1);
  EXPECT_GE(s.jobs_released, 1);
  // Both jobs done, and no launch failure of the broken device was stored.
  for (int64_t id : {job1, job2}) {
    auto job = server_->store()->GetJob(id);
    ASSERT_TRUE(job.ok());
    EXPECT_EQ(job->state, JobState::kDone);
    auto trials = server_->store()->ListTrials(job->run_id);
    ASSERT_TRUE(trials.ok());
    EXPECT_EQ(CountStage(*trials, TrialStage::kScreen), 3u);
    EXPECT_GE(CountStage(*trials, TrialStage::kFinal), 2u) << "the final rounds ran and were uploaded";
    for (const Trial& t : *trials) EXPECT_EQ(t.outcome, TrialOutcome::kOk) << t.message;
  }
}

TEST_F(WorkerTest, WatchdogReleasesTheJobOfAHungDeviceAndTheOtherDeviceFinishesIt) {
  const int64_t job1 = Submit(64, 3);
  const int64_t job2 = Submit(72, 3);
  static std::atomic<bool> release_hang{false};  // outlives the worker's abandoned thread
  WorkerOptions o = Options([&](int index) -> absl::StatusOr<std::unique_ptr<Backend>> {
    if (index == 1) return std::make_unique<BrokenBackend>(BrokenBackend::Mode::kHang, &release_hang);
    return CreateCpuBackend();
  });
  o.max_jobs = 2;
  // Long enough that the healthy device's small CPU trials finish well within it on a
  // loaded 2-core machine (they take milliseconds idle); the hung device still trips it.
  o.trial_timeout = absl::Seconds(15);
  auto worker = Worker::Create(o);
  ASSERT_TRUE(worker.ok()) << worker.status();
  ASSERT_TRUE(RunWithDeadline(**worker, 150).ok());
  WorkerStats s = (*worker)->stats();
  EXPECT_EQ(s.jobs_completed, 2);
  EXPECT_EQ(s.device_failures, 1);
  EXPECT_EQ(s.jobs_released, 1);
  for (int64_t id : {job1, job2}) {
    auto job = server_->store()->GetJob(id);
    ASSERT_TRUE(job.ok());
    EXPECT_EQ(job->state, JobState::kDone);
  }
  release_hang = true;  // let the abandoned thread finish
}

TEST_F(WorkerTest, LeaseTakenBackCancelsTheSweepAndTheJobIsFinishedOnTheSameRun) {
  const int64_t job = Submit(64, 6);
  WorkerOptions o = Options([](int) -> absl::StatusOr<std::unique_ptr<Backend>> { return CreateCpuBackend(); });
  o.cpu_devices = 1;
  o.max_jobs = 1;
  o.testing_trial_delay = absl::Milliseconds(150);
  auto worker = Worker::Create(o);
  ASSERT_TRUE(worker.ok()) << worker.status();
  std::thread take_back([&] {
    // Once two trials are in, the "server" takes the job back (as after a lease expiry).
    for (int i = 0; i < 1000; ++i) {
      auto j = server_->store()->GetJob(job);
      if (j.ok() && j->run_id > 0 && server_->store()->CountTrials(j->run_id).value_or(0) >= 2) {
        EXPECT_TRUE(server_->store()->ReleaseJob(job, "wt-d0", kNoLeaseToken).ok());
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  ASSERT_TRUE(RunWithDeadline(**worker, 60).ok());
  take_back.join();
  WorkerStats s = (*worker)->stats();
  EXPECT_EQ(s.jobs_lost, 1);       // the heartbeat's lease_valid=false stopped the first sweep
  EXPECT_EQ(s.jobs_completed, 1);  // then the re-queued job was leased again and finished
  auto j = server_->store()->GetJob(job);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->state, JobState::kDone);
  EXPECT_EQ(j->attempts, 2);
  auto trials = server_->store()->ListTrials(j->run_id);
  ASSERT_TRUE(trials.ok());
  // Resumed, not re-measured into duplicates: the screen trials of both variants once, and
  // one whole final set. A screen the take-back interrupted mid-measurement is recorded as
  // interrupted and measured again under the next attempt (sweep.h); it measured nothing, so
  // it is no duplicate, and there is at most that one.
  std::set<std::string> screened;
  size_t interrupted_screens = 0;
  for (const Trial& t : *trials) {
    if (t.stage != TrialStage::kScreen) continue;
    if (t.outcome == TrialOutcome::kInterrupted) {
      ++interrupted_screens;
    } else {
      EXPECT_TRUE(screened.insert(t.config_key).second) << "screened twice: " << t.config_key;
    }
  }
  EXPECT_EQ(screened.size(), 6u);
  EXPECT_LE(interrupted_screens, 1u);
  EXPECT_EQ(CountStage(*trials, TrialStage::kScreen), 6u + interrupted_screens);
  std::set<int> final_attempts;
  for (const Trial& t : *trials) {
    if (t.stage == TrialStage::kFinal) final_attempts.insert(t.attempt);
  }
  EXPECT_EQ(final_attempts.size(), 1u);
  EXPECT_LT(s.trials_recorded, 12);
}

TEST_F(WorkerTest, SpooledTrialsOfARunItDoesNotHoldAreParkedAndThoseStoredAlreadyDropped) {
  // A run this worker does not hold (no job of it is leased to it), with one trial stored.
  RunInfo run;
  run.commit = "test";
  run.device = CreateCpuBackend()->Describe();
  run.label = "elsewhere";
  auto run_id = server_->store()->BeginRun(run);
  ASSERT_TRUE(run_id.ok());
  auto make = [&](const std::string& config_key) {
    Trial t;
    t.run_id = *run_id;
    t.problem_key = "prefill/b1/hq2/hkv2/q64/k64/d32/causal0/fp32";
    t.config_key = config_key;
    t.trial_id = TrialId(t.run_id, t.problem_key, t.config_key, 0);
    t.outcome = TrialOutcome::kUnsupported;
    t.message = "test";
    return t;
  };
  const Trial stored = make("fused/bm16/bs16/t1/fp32/st1");
  const Trial only_here = make("fused/bm32/bs16/t1/fp32/st1");
  ASSERT_TRUE(server_->store()->RecordTrial(stored).ok());
  const std::string spool_path = (dir_ / "spool" / "wt-d0.spool").string();
  std::filesystem::create_directories(dir_ / "spool");
  {
    auto spool = TrialSpool::Open(spool_path);
    ASSERT_TRUE(spool.ok());
    ASSERT_TRUE((*spool)->RecordTrial(stored).ok());
    ASSERT_TRUE((*spool)->RecordTrial(only_here).ok());
  }
  WorkerOptions o = Options([](int) -> absl::StatusOr<std::unique_ptr<Backend>> { return CreateCpuBackend(); });
  o.cpu_devices = 1;
  auto worker = Worker::Create(o);
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_TRUE(RunWithDeadline(**worker, 2).ok());  // no job to do: stopped after 2 s, cleanly
  worker->reset();
  auto log = ReadSpoolLog(spool_path);
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(log->acknowledged, std::vector<std::string>{stored.trial_id});  // already on the server
  auto spool = TrialSpool::Open(spool_path);
  ASSERT_TRUE(spool.ok());
  std::vector<Trial> pending = (*spool)->Pending(10);
  ASSERT_EQ(pending.size(), 1u);  // kept, not lost: parked until this device holds the run
  EXPECT_EQ(pending[0].trial_id, only_here.trial_id);
  EXPECT_FALSE(*server_->store()->HasTrial(only_here.trial_id));
}

TEST_F(WorkerTest, AuditJobAuditsTheTunedProblemReportsItAndNamesTheUntunedOne) {
  // A tune job records a best config for the 64-token problem; the audit job after it
  // audits that problem and a 72-token one that nothing was recorded for.
  const int64_t tune = Submit(64, 3);
  const int64_t audit = Submit({64, 72}, 0, v1::JOB_KIND_AUDIT);
  WorkerOptions o = Options([](int) -> absl::StatusOr<std::unique_ptr<Backend>> { return CreateCpuBackend(); });
  o.cpu_devices = 1;  // one device: the audit is leased only after the tune completed
  o.max_jobs = 2;
  auto worker = Worker::Create(o);
  ASSERT_TRUE(worker.ok()) << worker.status();
  ASSERT_TRUE(RunWithDeadline(**worker, 300).ok());
  WorkerStats s = (*worker)->stats();
  EXPECT_EQ(s.jobs_completed, 1);  // the tune
  EXPECT_EQ(s.jobs_failed, 1);     // the audit: one of its problems could not be audited

  auto tuned = server_->store()->GetJob(tune);
  ASSERT_TRUE(tuned.ok());
  EXPECT_EQ(tuned->state, JobState::kDone);
  const std::string key64 = Problem(64).Key(), key72 = Problem(72).Key();
  auto best = server_->store()->GetBestConfig(device_class_, key64);
  ASSERT_TRUE(best.ok()) << best.status();

  auto audited = server_->store()->GetJob(audit);
  ASSERT_TRUE(audited.ok());
  EXPECT_EQ(audited->state, JobState::kFailed);
  EXPECT_NE(audited->error.find(key72), std::string::npos) << audited->error;
  EXPECT_NE(audited->error.find("no best config recorded"), std::string::npos) << audited->error;
  EXPECT_EQ(audited->error.find(key64), std::string::npos) << audited->error;

  // The audit is listed, under the audit job's run, of the recorded config.
  v1::ListAuditsRequest req;
  req.set_device_class(device_class_);
  v1::ListAuditsResponse resp;
  grpc::ClientContext ctx;
  grpc::Status st = stub_->ListAudits(&ctx, req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.audits_size(), 1);
  const v1::AuditSummary& a = resp.audits(0);
  EXPECT_EQ(a.problem_key(), key64);
  EXPECT_EQ(a.run_id(), audited->run_id);
  EXPECT_EQ(a.recorded_config_key(), best->config_key);
  EXPECT_FALSE(a.best_config_key().empty());
  EXPECT_GE(a.configs_measured(), 1);
  EXPECT_GE(a.rounds(), 1);
  EXPECT_TRUE(std::isfinite(a.regret()));
  // Its trials went through the spool to the server, and the recorded best is unchanged.
  auto trials = server_->store()->ListTrials(audited->run_id);
  ASSERT_TRUE(trials.ok());
  EXPECT_GE(static_cast<int>(trials->size()), a.configs_measured());
  for (const Trial& t : *trials) EXPECT_EQ(t.problem_key, key64);
  auto best_after = server_->store()->GetBestConfig(device_class_, key64);
  ASSERT_TRUE(best_after.ok());
  EXPECT_EQ(best_after->config_key, best->config_key);
  EXPECT_EQ(best_after->run_id, best->run_id);
}

TEST_F(WorkerTest, BadOptionsAreClearErrors) {
  WorkerOptions o;
  EXPECT_TRUE(absl::IsInvalidArgument(Worker::Create(o).status()));
  o.server = address_;
  EXPECT_TRUE(absl::IsInvalidArgument(Worker::Create(o).status()));  // no spool
  o.spool_dir = (dir_ / "spool").string();
  o.worker_id = "bad/id";
  EXPECT_TRUE(absl::IsInvalidArgument(Worker::Create(o).status()));
  o.worker_id = "ok";
  o.backend = "cuda";
  o.cpu_devices = 2;
  EXPECT_TRUE(absl::IsInvalidArgument(Worker::Create(o).status()));
  o.backend = "nosuch";
  o.cpu_devices = 0;
  EXPECT_FALSE(Worker::Create(o).ok());
}

}  // namespace
}  // namespace fusetune
