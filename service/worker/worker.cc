#include "fusetune/worker/worker.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "fusetune/base/time.h"
#include "fusetune/kernels/cpu_backend.h"
#include "fusetune/proto/fusetune.grpc.pb.h"
#include "fusetune/wire/connection.h"
#include "fusetune/wire/records_convert.h"
#include "fusetune/wire/status.h"
#include "fusetune/tuner/audit.h"
#include "fusetune/tuner/sweep.h"
#include "fusetune/worker/spool.h"
#include "grpcpp/grpcpp.h"

namespace fusetune {
namespace {

constexpr int kUploadBatch = 256;          // trials per ReportTrials stream (server: <= 4096)
constexpr int kListTrialsLimit = 10000;    // resume lookup: the server's maximum
constexpr int64_t kDefaultLeaseMs = 30000;
constexpr absl::Duration kParkRetry = absl::Seconds(60);

std::string StatusText(const absl::Status& s) { return std::string(s.ToString()); }

// The server's bounds on a trial (convert.h); a trial that would break them is fixed up
// before it is spooled, so the upload can never be refused for it.
Trial SanitizeForUpload(Trial t) {
  if (t.message.size() > kMaxTextLength) t.message.resize(kMaxTextLength - 3), t.message += "...";
  if (t.samples_us.size() > static_cast<size_t>(kMaxSamplesPerTrial)) t.samples_us.resize(kMaxSamplesPerTrial);
  for (double& s : t.samples_us) {
    if (!std::isfinite(s) || s < 0) s = 0;
  }
  for (double* v : {&t.median_us, &t.p10_us, &t.p90_us, &t.flops}) {
    if (!std::isfinite(*v) || *v < 0) *v = 0;
  }
  for (double* e : {&t.max_abs_error, &t.max_rel_error}) {
    if (std::isnan(*e) || *e < 0) *e = std::numeric_limits<double>::infinity();
  }
  if (!std::isfinite(t.wall_seconds) || t.wall_seconds < 0) t.wall_seconds = 0;
  if (t.blocks.size() > static_cast<size_t>(kMaxBlocksPerTrial)) t.blocks.resize(kMaxBlocksPerTrial);
  for (SampleBlock& b : t.blocks) {
    b.samples = std::clamp(b.samples, 0, kMaxSamplesPerBlock);
    if (!std::isfinite(b.median_us) || b.median_us < 0) b.median_us = 0;
    for (DeviceState* d : {&b.before, &b.after}) {
      d->sm_clock_mhz = std::max(0, d->sm_clock_mhz);
      d->power_mw = std::max(0, d->power_mw);
    }
  }
  return t;
}

}  // namespace

// ----------------------------------------------------------------------------- shared state

struct Worker::Shared {
  WorkerOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::WorkerService::Stub> worker_stub;
  std::unique_ptr<v1::TuningService::Stub> tuning_stub;
  std::atomic<bool> stop{false};  // Worker::RequestStop

  std::atomic<int64_t> jobs_reserved{0};   // leased or being leased, for max_jobs
  std::atomic<int64_t> jobs_completed{0};
  std::atomic<int64_t> jobs_failed{0};
  std::atomic<int64_t> jobs_released{0};
  std::atomic<int64_t> jobs_lost{0};
  std::atomic<int64_t> trials_recorded{0};
  std::atomic<int64_t> trials_uploaded{0};
  std::atomic<int64_t> trials_rejected{0};
  std::atomic<int64_t> device_failures{0};

  // In-flight calls, so that a stop cancels long polls at once.
  absl::Mutex calls_mu;
  absl::flat_hash_set<grpc::ClientContext*> calls ABSL_GUARDED_BY(calls_mu);

  bool stopping() const { return stop.load(std::memory_order_relaxed); }
  bool max_jobs_done() const {
    return options.max_jobs > 0 && jobs_completed.load() + jobs_failed.load() >= options.max_jobs;
  }

  void Log(const std::string& line) {
    if (options.log) {
      options.log(line);
      return;
    }
    const absl::Time now = absl::Now();
    std::fprintf(stderr, "%s %s\n", absl::FormatTime("%H:%M:%E3S", now, absl::UTCTimeZone()).c_str(),
                 line.c_str());
  }

  // Prepares a context: deadline, token; registered so a stop can cancel it.
  // `cancel_on_stop`: long polls and registration, which a stop should cut short (uploads,
  // releases and completions during shutdown must not be). Those calls also wait for the
  // channel to (re)connect within their deadline instead of failing at once while the
  // service is away, so they go out the moment gRPC's bounded reconnect succeeds rather than
  // a whole worker backoff later.
  void Prepare(grpc::ClientContext& ctx, absl::Duration timeout, bool cancel_on_stop = false) {
    ctx.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
    if (!options.token.empty()) ctx.AddMetadata("authorization", "Bearer " + options.token);
    if (!cancel_on_stop) return;
    ctx.set_wait_for_ready(true);
    absl::MutexLock lock(&calls_mu);
    calls.insert(&ctx);
  }
  void Done(grpc::ClientContext& ctx) {
    absl::MutexLock lock(&calls_mu);
    calls.erase(&ctx);
  }
  void CancelAllCalls() {
    absl::MutexLock lock(&calls_mu);
    for (grpc::ClientContext* c : calls) c->TryCancel();
  }

  // Sleeps up to `d`, waking early when stopping (polls: a signal handler cannot notify).
  void SleepUnlessStopping(absl::Duration d) {
    const absl::Time until = absl::Now() + d;
    while (!stopping() && absl::Now() < until) {
      absl::SleepFor(std::min(absl::Milliseconds(20), until - absl::Now()));
    }
  }
};

// ----------------------------------------------------------------------------- DeviceRunner

class Worker::DeviceRunner {
 public:
  DeviceRunner(std::shared_ptr<Shared> shared, int slot, int device_index, std::unique_ptr<Backend> backend,
               std::unique_ptr<TrialSpool> spool, int thread_cap)
      : shared_owner_(shared),
        shared_(*shared),
        slot_(slot),
        device_index_(device_index),
        worker_id_(absl::StrCat(shared->options.worker_id, "-d", slot)),
        backend_(std::move(backend)),
        spool_(std::move(spool)),
        thread_cap_(thread_cap) {
    watchdog_limit_ms_.store(absl::ToInt64Milliseconds(shared_.options.trial_timeout));
    info_ = backend_->Describe();
    info_.device_index = slot;  // CPU slots share index 0; report the slot we drive
    device_class_ = info_.DeviceClass();
  }

  const std::string& worker_id() const { return worker_id_; }
  const std::string& spool_path() const { return spool_->path(); }

  void Start() {
    uploader_ = std::thread([this] { UploadLoop(); });
    heartbeat_ = std::thread([this] { HeartbeatLoop(); });
    main_ = std::thread([this] { MainLoop(); });
  }

  // Waits for the device's threads. A device hung in a kernel cannot be joined; its main
  // thread is detached (and the runner leaked) so the process can still exit.
  bool Join(absl::Duration hung_grace) {
    const absl::Time until = absl::Now() + hung_grace;
    while (!main_done_.load() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(20));
    const bool clean = main_done_.load();
    if (clean) {
      main_.join();
    } else {
      main_.detach();
    }
    threads_stop_.store(true);
    upload_cv_.notify_all();
    uploader_.join();
    heartbeat_.join();
    return clean;
  }

  bool main_done() const { return main_done_.load(); }
  // Stuck in a trial the watchdog gave up on.
  bool hung() const { return hung_.load() && sweep_running_.load(); }
  bool ever_registered() const { return ever_registered_.load(); }

  void NotifyUploader() { upload_cv_.notify_all(); }

 private:
  void Log(const std::string& msg) { shared_.Log(absl::StrCat("[", worker_id_, "] ", msg)); }

  // ---- registration
  bool Register() {
    Backoff backoff(shared_.options.backoff, std::hash<std::string>{}(worker_id_));
    while (!shared_.stopping()) {
      v1::RegisterWorkerRequest req;
      req.set_worker_id(worker_id_);
      req.set_host(shared_.options.host);
      DeviceInfoToProto(info_, req.mutable_device());
      v1::RegisterWorkerResponse resp;
      grpc::ClientContext ctx;
      shared_.Prepare(ctx, absl::Seconds(10), /*cancel_on_stop=*/true);
      grpc::Status st = shared_.worker_stub->RegisterWorker(&ctx, req, &resp);
      shared_.Done(ctx);
      if (st.ok()) {
        lease_ms_.store(resp.lease_ms() > 0 ? resp.lease_ms() : kDefaultLeaseMs);
        heartbeat_ms_.store(resp.heartbeat_ms() > 0 ? resp.heartbeat_ms()
                                                    : std::max<int64_t>(100, lease_ms_.load() / 3));
        ever_registered_.store(true);
        Log(absl::StrCat("registered ", device_class_, " (lease ", lease_ms_.load(), " ms, heartbeat ",
                         heartbeat_ms_.load(), " ms)"));
        return true;
      }
      const int64_t delay = backoff.NextDelayMs();
      Log(absl::StrCat("register failed: ", st.error_message(), " (code ", st.error_code(),
                       "); retry in ", delay, " ms"));
      shared_.SleepUnlessStopping(absl::Milliseconds(delay));
    }
    return false;
  }

  // ---- the device's main loop
  void MainLoop() {
    if (Register()) {
      DrainSpoolFirst();
      Backoff backoff(shared_.options.backoff, std::hash<std::string>{}(worker_id_) + 1);
      while (!shared_.stopping() && !shared_.max_jobs_done()) {
        if (device_failed_until_ > absl::Now()) {
          shared_.SleepUnlessStopping(std::min(absl::Milliseconds(200), device_failed_until_ - absl::Now()));
          continue;
        }
        if (needs_new_backend_) {
          if (!RecreateBackend()) continue;
        }
        // Reserve a job slot so that devices together never exceed max_jobs.
        if (shared_.options.max_jobs > 0 && shared_.jobs_reserved.fetch_add(1) >= shared_.options.max_jobs) {
          shared_.jobs_reserved.fetch_sub(1);
          shared_.SleepUnlessStopping(absl::Milliseconds(100));
          continue;
        }
        v1::LeaseJobResponse lease;
        absl::Status st = Lease(lease);
        if (!st.ok() || !lease.leased()) {
          if (shared_.options.max_jobs > 0) shared_.jobs_reserved.fetch_sub(1);
          if (!st.ok() && !shared_.stopping() && !shared_.max_jobs_done()) {
            if (ErrorReason(st) == kReasonWorkerNotRegistered) Register();  // the server forgot us
            const int64_t delay = backoff.NextDelayMs();
            Log(absl::StrCat("lease failed: ", StatusText(st), "; retry in ", delay, " ms"));
            shared_.SleepUnlessStopping(absl::Milliseconds(delay));
          }
          continue;
        }
        backoff.Reset();
        holds_reservation_.store(shared_.options.max_jobs > 0);
        const bool finished = RunJob(lease);
        if (!finished) ReturnReservation();
      }
    }
    main_done_.store(true);
  }

  absl::Status Lease(v1::LeaseJobResponse& lease) {
    v1::LeaseJobRequest req;
    req.set_worker_id(worker_id_);
    req.set_device_class(device_class_);
    req.set_wait_ms(shared_.options.lease_wait_ms);
    grpc::ClientContext ctx;
    shared_.Prepare(ctx, absl::Milliseconds(shared_.options.lease_wait_ms) + absl::Seconds(10),
                    /*cancel_on_stop=*/true);
    grpc::Status st = shared_.worker_stub->LeaseJob(&ctx, req, &lease);
    shared_.Done(ctx);
    return FromGrpcCall(st, ctx);
  }

  // Before leasing anything, upload what an earlier life of this worker left in the spool.
  void DrainSpoolFirst() {
    const size_t pending = spool_->pending_count();
    if (pending == 0) return;
    Log(absl::StrCat("spool holds ", pending, " trials from before; uploading them first"));
    upload_cv_.notify_all();
    while (!shared_.stopping()) {
      if (UploadablePending() == 0) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    Log(absl::StrCat("spool drained (", spool_->pending_count(), " parked for runs not held)"));
  }

  // A job that did not finish here frees its max_jobs slot for another device (once: the
  // watchdog and the main thread may both get here).
  void ReturnReservation() {
    if (holds_reservation_.exchange(false)) shared_.jobs_reserved.fetch_sub(1);
  }

  bool RecreateBackend() {
    absl::StatusOr<std::unique_ptr<Backend>> b = shared_.options.backend_factory(device_index_);
    if (!b.ok()) {
      Log(absl::StrCat("device still unavailable: ", StatusText(b.status())));
      device_failed_until_ = absl::Now() + shared_.options.device_retry;
      return false;
    }
    backend_ = *std::move(b);
    needs_new_backend_ = false;
    Log("device back in service");
    return true;
  }

  // Runs one leased job to the end. True when the job was completed (success or failure
  // reported), false when it was released or lost.
  bool RunJob(const v1::LeaseJobResponse& lease) {
    const int64_t job_id = lease.job().job_id();
    const int64_t run_id = lease.job().run_id();
    Log(absl::StrCat("leased job ", job_id, " (run ", run_id, ", attempt ", lease.job().attempts(), ", ",
                     lease.problems_size(), " problems)"));
    if (run_id <= 0) {
      Release(job_id, "lease carried no run id");
      return false;
    }
    cancel_.store(false);
    lease_lost_.store(false);
    hung_.store(false);
    device_error_.store(false);
    {
      std::lock_guard<std::mutex> lock(job_mu_);
      job_id_ = job_id;
      run_id_ = run_id;
      parked_runs_.erase(run_id);  // we hold this run again: its parked trials may go
    }
    upload_cv_.notify_all();

    auto finish = [&](bool completed) {
      std::lock_guard<std::mutex> lock(job_mu_);
      job_id_ = 0;
      run_id_ = 0;
      return completed;
    };

    // The job's problems and options; an unrunnable job is failed, not retried forever.
    std::vector<AttentionProblem> problems;
    for (const v1::Problem& p : lease.problems()) {
      absl::StatusOr<AttentionProblem> problem = JobProblemFromProto(p);
      if (!problem.ok()) {
        Complete(job_id, false, absl::StrCat("bad problem: ", problem.status().message()));
        return finish(true);
      }
      problems.push_back(*std::move(problem));
    }
    absl::StatusOr<SweepOptions> options = SweepOptionsFor(lease);
    if (!options.ok() || problems.empty()) {
      Complete(job_id, false, options.ok() ? "job without problems" : std::string(options.status().message()));
      return finish(true);
    }
    if (lease.job().kind() == v1::JOB_KIND_AUDIT) return finish(RunAuditJob(lease, problems, *options));
    if (lease.job().kind() != v1::JOB_KIND_TUNE) {
      Complete(job_id, false, absl::StrCat("unknown job kind ", static_cast<int>(lease.job().kind()),
                                           " (this worker runs tune and audit jobs)"));
      return finish(true);
    }

    // Resume: what the server already stored for this run, plus what our spool holds.
    absl::StatusOr<std::vector<Trial>> known = KnownTrials(run_id);
    if (!known.ok()) {
      Log(absl::StrCat("cannot read the run's trials: ", StatusText(known.status()), "; releasing"));
      Release(job_id, "resume lookup failed");
      return finish(false);
    }
    const size_t resumed = known->size();
    TrialLookup lookup = LookupInTrials(*std::move(known));

    // Trials go to the spool, except the evidence of a broken device: launch failures are
    // held back while they form a streak, and a streak of device_error_streak of them marks
    // the device failed and is discarded, so that the next holder of the job measures those
    // configs on a healthy device instead of resuming from the broken device's failures.
    // A trial that a hung device returns after the watchdog gave up is discarded too.
    class SpoolSink : public TrialSink {
     public:
      explicit SpoolSink(DeviceRunner& d) : d_(d) {}
      absl::Status RecordTrial(const Trial& trial) override {
        d_.last_trial_ms_.store(NowUnixMs());
        if (d_.hung_.load() || d_.device_error_.load()) return absl::OkStatus();
        const int streak = d_.shared_.options.device_error_streak;
        if (trial.outcome == TrialOutcome::kLaunchFailed && streak > 0) {
          held_.push_back(trial);
          if (static_cast<int>(held_.size()) >= streak) {
            d_.Log(absl::StrCat(streak, " launch failures in a row (last: ", trial.message,
                                "); device considered failed"));
            held_.clear();
            d_.device_error_.store(true);
            d_.cancel_.store(true);
          }
          return absl::OkStatus();
        }
        if (absl::Status s = Flush(); !s.ok()) return s;
        return Append(trial);
      }
      // Records the held-back failures (they were not a device failure after all).
      absl::Status Flush() {
        for (const Trial& t : held_) {
          if (absl::Status s = Append(t); !s.ok()) return s;
        }
        held_.clear();
        return absl::OkStatus();
      }

     private:
      absl::Status Append(const Trial& trial) {
        absl::Status s = d_.spool_->RecordTrial(SanitizeForUpload(trial));
        if (s.ok()) {
          d_.shared_.trials_recorded.fetch_add(1);
          d_.upload_cv_.notify_all();
        }
        if (d_.shared_.options.testing_trial_delay > absl::ZeroDuration()) {
          absl::SleepFor(d_.shared_.options.testing_trial_delay);
          d_.last_trial_ms_.store(NowUnixMs());
        }
        return s;
      }
      DeviceRunner& d_;
      std::vector<Trial> held_;
    } sink(*this);

    // The sweep stops between trials when we stop, lose the lease, or hang.
    std::atomic<bool>& cancel = cancel_;
    std::thread stop_watch([&] {
      while (!cancel.load() && !sweep_done_.load()) {
        if (shared_.stopping()) cancel.store(true);
        absl::SleepFor(absl::Milliseconds(20));
      }
    });
    sweep_done_.store(false);
    last_trial_ms_.store(NowUnixMs());
    sweep_running_.store(true);
    const absl::Time t0 = absl::Now();
    absl::StatusOr<SweepResult> result =
        RunSweep(*backend_, problems, *options, run_id, sink, lookup,
                 [&](const SweepProgress& p) {
                   Log(absl::StrCat("job ", job_id, " problem ", p.problem_index + 1, "/", p.problem_count, " ",
                                    p.problem_key, ": ", p.trials_measured, " measured, ", p.trials_resumed,
                                    " resumed, ", p.trials_ok, " ok"));
                 },
                 &cancel_);
    sweep_running_.store(false);
    sweep_done_.store(true);
    stop_watch.join();

    if (hung_.load()) {
      // The watchdog already released the job; this device gets a fresh backend later.
      Log(absl::StrCat("job ", job_id, ": sweep returned after the watchdog gave the job up"));
      MarkDeviceFailed();
      return finish(false);
    }
    if (lease_lost_.load()) {
      Log(absl::StrCat("job ", job_id, ": lease taken back by the server; dropping it"));
      shared_.jobs_lost.fetch_add(1);
      return finish(false);
    }
    if (device_error_.load()) {
      shared_.device_failures.fetch_add(1);
      WaitUploaded(run_id, shared_.options.shutdown_upload_timeout);
      Release(job_id, "device failure");
      MarkDeviceFailed();
      return finish(false);
    }
    if (absl::Status flushed = sink.Flush(); result.ok() && !flushed.ok()) result = flushed;
    if (!result.ok()) {
      shared_.device_failures.fetch_add(1);
      Log(absl::StrCat("job ", job_id, ": sweep failed: ", StatusText(result.status()),
                       "; releasing and resting the device"));
      WaitUploaded(run_id, shared_.options.shutdown_upload_timeout);
      Release(job_id, "device failure");
      MarkDeviceFailed();
      return finish(false);
    }
    const bool complete = !result->cancelled;
    Log(absl::StrCat("job ", job_id, ": sweep ", complete ? "finished" : "stopped", " in ",
                     absl::FormatDuration(absl::Trunc(absl::Now() - t0, absl::Milliseconds(1))), " (", result->trials_measured, " measured, ",
                     result->trials_resumed, " resumed of ", resumed, " known)"));
    if (!complete) {  // stopping: give the job back with everything measured so far
      WaitUploaded(run_id, shared_.options.shutdown_upload_timeout);
      Release(job_id, "worker shutting down");
      return finish(false);
    }
    // Every trial must be on the server before the job may complete (completion recomputes
    // the best configs from the stored trials).
    if (!WaitUploaded(run_id, absl::InfiniteDuration())) {
      if (lease_lost_.load()) {
        shared_.jobs_lost.fetch_add(1);
        Log(absl::StrCat("job ", job_id, ": lease lost while uploading"));
        return finish(false);
      }
      // Stopping with the sweep done: complete if the uploads make it in time.
      if (!WaitUploaded(run_id, shared_.options.shutdown_upload_timeout)) {
        Release(job_id, "worker shutting down before its trials were uploaded");
        return finish(false);
      }
    }
    Complete(job_id, true, "");
    return finish(true);
  }

  // An audit job: for each problem, its recorded best config (from the lease) re-measured
  // against the problem's space with RunAudit; the audit's trials go through the spool and
  // the uploader like a sweep's, then its summary goes to ReportAudit. A problem that cannot
  // be audited (nothing recorded, or the recorded config does not verify here) is named in
  // the job's error and the others still run; the job fails when any problem did. True when
  // the job was completed, false when it was released or lost.
  bool RunAuditJob(const v1::LeaseJobResponse& lease, const std::vector<AttentionProblem>& problems,
                   const SweepOptions& sweep) {
    const int64_t job_id = lease.job().job_id();
    const int64_t run_id = lease.job().run_id();
    if (lease.recorded_config_keys_size() != static_cast<int>(problems.size())) {
      Complete(job_id, false, absl::StrCat("audit lease carries ", lease.recorded_config_keys_size(),
                                           " recorded configs for ", problems.size(), " problems"));
      return true;
    }
    AuditOptions audit;
    audit.space = sweep.space;
    audit.runner = sweep.runner;
    audit.seed = shared_.options.search_seed;

    // Cancels the audit between measurements when the worker stops.
    std::atomic<bool>& cancel = cancel_;
    std::atomic<bool> audits_done{false};
    std::thread stop_watch([&] {
      while (!cancel.load() && !audits_done.load()) {
        if (shared_.stopping()) cancel.store(true);
        absl::SleepFor(absl::Milliseconds(20));
      }
    });
    struct JoinAtExit {
      std::atomic<bool>& done;
      std::thread& thread;
      ~JoinAtExit() {
        done.store(true);
        thread.join();
      }
    } join_at_exit{audits_done, stop_watch};

    std::vector<std::string> failures;
    int audited = 0;
    bool stopped = false;
    for (size_t i = 0; i < problems.size() && !cancel_.load(); ++i) {
      const AttentionProblem& problem = problems[i];
      const std::string key = problem.Key();
      const std::string& recorded_key = lease.recorded_config_keys(static_cast<int>(i));
      if (recorded_key.empty()) {
        failures.push_back(absl::StrCat(key, ": no best config recorded on ", lease.job().device_class(),
                                        " (tune it first)"));
        Log(absl::StrCat("job ", job_id, " ", failures.back()));
        continue;
      }
      absl::StatusOr<KernelConfig> recorded = KernelConfig::FromKey(recorded_key);
      if (!recorded.ok()) {
        failures.push_back(absl::StrCat(key, ": recorded config '", recorded_key, "': ", recorded.status().message()));
        continue;
      }
      if (AlreadyAudited(run_id, lease.job().device_class(), key)) {  // a resumed job
        ++audited;
        continue;
      }
      // The watchdog allows the whole audit: every candidate once, then the rounds.
      const int64_t measurements =
          std::max<int64_t>(1, static_cast<int64_t>(backend_->CandidateConfigs(problem).size())) +
          int64_t{audit.rounds} * (audit.max_contenders + 1);
      watchdog_limit_ms_.store(measurements * absl::ToInt64Milliseconds(shared_.options.trial_timeout));
      last_trial_ms_.store(NowUnixMs());
      audit_running_.store(true);
      sweep_running_.store(true);
      const absl::Time t0 = absl::Now();
      absl::StatusOr<AuditResult> result = RunAudit(*backend_, problem, *recorded, audit, run_id, &cancel_);
      sweep_running_.store(false);
      audit_running_.store(false);
      last_trial_ms_.store(NowUnixMs());
      watchdog_limit_ms_.store(absl::ToInt64Milliseconds(shared_.options.trial_timeout));

      if (hung_.load()) {
        Log(absl::StrCat("job ", job_id, ": audit returned after the watchdog gave the job up"));
        MarkDeviceFailed();
        return false;
      }
      if (lease_lost_.load()) {
        Log(absl::StrCat("job ", job_id, ": lease taken back by the server; dropping it"));
        shared_.jobs_lost.fetch_add(1);
        return false;
      }
      if (absl::IsCancelled(result.status())) {  // stopping: released below
        stopped = true;
        break;
      }
      if (absl::IsFailedPrecondition(result.status()) || absl::IsInvalidArgument(result.status())) {
        failures.push_back(absl::StrCat(key, ": ", result.status().message()));
        Log(absl::StrCat("job ", job_id, " cannot audit ", failures.back()));
        continue;
      }
      absl::Status spooled = result.status();
      if (result.ok()) {
        for (const Trial& t : result->trials) {
          spooled = spool_->RecordTrial(SanitizeForUpload(t));
          if (!spooled.ok()) break;
          shared_.trials_recorded.fetch_add(1);
        }
        upload_cv_.notify_all();
      }
      if (!spooled.ok()) {
        shared_.device_failures.fetch_add(1);
        Log(absl::StrCat("job ", job_id, ": audit of ", key, " failed: ", StatusText(spooled),
                         "; releasing and resting the device"));
        WaitUploaded(run_id, shared_.options.shutdown_upload_timeout);
        Release(job_id, "device failure");
        MarkDeviceFailed();
        return false;
      }
      AuditSummary summary = result->summary;
      summary.run_id = run_id;
      summary.device_class = lease.job().device_class();
      summary.problem_key = key;
      summary.recorded_config_key = recorded_key;
      summary.commit = lease.job().commit();
      Log(absl::StrCat("job ", job_id, " audited ", key, " in ",
                       absl::FormatDuration(absl::Trunc(absl::Now() - t0, absl::Milliseconds(1))), ": recorded ",
                       recorded_key, " ", summary.recorded_us, " us, best ", summary.best_config_key, " ",
                       summary.best_us, " us, regret ", 100 * summary.regret, "% [", 100 * summary.regret_low, ", ",
                       100 * summary.regret_high, "]"));
      // The summary refers to its trials: they go first.
      if (!WaitUploaded(run_id, absl::InfiniteDuration())) {
        if (lease_lost_.load()) {
          shared_.jobs_lost.fetch_add(1);
          Log(absl::StrCat("job ", job_id, ": lease lost while uploading"));
          return false;
        }
        if (!WaitUploaded(run_id, shared_.options.shutdown_upload_timeout)) {
          Release(job_id, "worker shutting down before its trials were uploaded");
          return false;
        }
      }
      absl::Status reported = ReportAudit(job_id, summary);
      if (reported.ok()) {
        ++audited;
      } else if (absl::IsInvalidArgument(reported)) {
        failures.push_back(absl::StrCat(key, ": audit refused by the server: ", reported.message()));
      } else if (absl::IsFailedPrecondition(reported) || absl::IsNotFound(reported)) {
        shared_.jobs_lost.fetch_add(1);
        Log(absl::StrCat("job ", job_id, ": audit report refused (", StatusText(reported), "); dropping the job"));
        return false;
      } else {  // transport trouble until shutdown: another holder audits the rest
        WaitUploaded(run_id, shared_.options.shutdown_upload_timeout);
        Release(job_id, absl::StrCat("audit report failed: ", reported.message()));
        return false;
      }
    }
    if (stopped || cancel_.load()) {
      if (lease_lost_.load()) {
        shared_.jobs_lost.fetch_add(1);
        Log(absl::StrCat("job ", job_id, ": lease taken back by the server; dropping it"));
        return false;
      }
      WaitUploaded(run_id, shared_.options.shutdown_upload_timeout);
      Release(job_id, "worker shutting down");
      return false;
    }
    Log(absl::StrCat("job ", job_id, ": ", audited, " of ", problems.size(), " problems audited"));
    if (failures.empty()) {
      Complete(job_id, true, "");
    } else {
      Complete(job_id, false,
               absl::StrCat(failures.size(), " of ", problems.size(), " problems not audited: ",
                            absl::StrJoin(failures, "; ")));
    }
    return true;
  }

  // True when the server already holds this run's audit of `problem_key` (the job was
  // resumed after another holder's lease lapsed). False when not, or when it cannot tell:
  // the audit is then measured again, and ReportAudit answers the stored one.
  bool AlreadyAudited(int64_t run_id, const std::string& device_class, const std::string& problem_key) {
    v1::ListAuditsRequest req;
    req.set_device_class(device_class);
    req.set_problem_key(problem_key);
    req.set_limit(1000);
    v1::ListAuditsResponse resp;
    grpc::ClientContext ctx;
    shared_.Prepare(ctx, absl::Seconds(30));
    grpc::Status st = shared_.tuning_stub->ListAudits(&ctx, req, &resp);
    shared_.Done(ctx);
    if (!st.ok()) return false;
    for (const v1::AuditSummary& a : resp.audits()) {
      if (a.run_id() == run_id) return true;
    }
    return false;
  }

  // ReportAudit, retried (backoff) while the service is unreachable; the server's answer
  // otherwise. Gives up after a few tries once the worker is stopping.
  absl::Status ReportAudit(int64_t job_id, const AuditSummary& summary) {
    Backoff backoff(shared_.options.backoff);
    while (true) {
      v1::ReportAuditRequest req;
      req.set_worker_id(worker_id_);
      req.set_job_id(job_id);
      AuditSummaryToProto(summary, req.mutable_audit());
      v1::ReportAuditResponse resp;
      grpc::ClientContext ctx;
      shared_.Prepare(ctx, absl::Seconds(30));
      grpc::Status st = shared_.worker_stub->ReportAudit(&ctx, req, &resp);
      shared_.Done(ctx);
      if (st.ok()) return absl::OkStatus();
      absl::Status status = FromGrpcCall(st, ctx);
      if (ErrorReason(status) == kReasonWorkerNotRegistered) {
        if (!Register()) return status;  // stopping
        continue;
      }
      if (st.error_code() != grpc::StatusCode::UNAVAILABLE && st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED &&
          st.error_code() != grpc::StatusCode::CANCELLED) {
        return status;
      }
      if (lease_lost_.load() || (shared_.stopping() && backoff.attempt() > 5)) return status;
      const int64_t delay = backoff.NextDelayMs();
      Log(absl::StrCat("report audit failed: ", st.error_message(), "; retry in ", delay, " ms"));
      absl::SleepFor(absl::Milliseconds(delay));
    }
  }

  absl::StatusOr<SweepOptions> SweepOptionsFor(const v1::LeaseJobResponse& lease) {
    SweepOptions o;
    for (const std::string& v : lease.variants()) {
      absl::StatusOr<Variant> variant = ParseVariant(v);
      if (!variant.ok()) return variant.status();
      o.space.variants.push_back(*variant);
    }
    for (const std::string& p : lease.precisions()) {
      absl::StatusOr<Precision> precision = ParsePrecision(p);
      if (!precision.ok()) return precision.status();
      o.space.precisions.push_back(*precision);
    }
    if (thread_cap_ > 0) {
      for (int t = 1; t <= thread_cap_; t *= 2) o.space.threads.push_back(t);
      if (o.space.threads.back() != thread_cap_) o.space.threads.push_back(thread_cap_);
    }
    o.seed = shared_.options.search_seed;
    o.max_trials_per_variant = std::max(0, lease.max_trials());
    o.max_seconds_per_problem = std::max(0.0, lease.max_seconds());
    o.runner.trial_time_limit_seconds = absl::ToDoubleSeconds(shared_.options.trial_timeout);
    o.commit = lease.job().commit();
    return o;
  }

  absl::StatusOr<std::vector<Trial>> KnownTrials(int64_t run_id) {
    std::vector<Trial> known = spool_->TrialsForRun(run_id);
    absl::flat_hash_set<std::string> ids;
    for (const Trial& t : known) ids.insert(t.trial_id);
    Backoff backoff(shared_.options.backoff);
    while (true) {
      v1::ListTrialsRequest req;
      req.set_run_id(run_id);
      req.set_limit(kListTrialsLimit);
      v1::ListTrialsResponse resp;
      grpc::ClientContext ctx;
      shared_.Prepare(ctx, absl::Seconds(30));
      grpc::Status st = shared_.tuning_stub->ListTrials(&ctx, req, &resp);
      shared_.Done(ctx);
      if (st.ok()) {
        for (const v1::Trial& p : resp.trials()) {
          absl::StatusOr<Trial> t = TrialFromProto(p);
          if (t.ok() && ids.insert(t->trial_id).second) known.push_back(*std::move(t));
        }
        if (resp.truncated()) {
          Log(absl::StrCat("run ", run_id, " has more than ", kListTrialsLimit,
                           " trials; the rest are re-measured (same ids, not duplicated)"));
        }
        return known;
      }
      if (shared_.stopping() || lease_lost_.load()) return FromGrpcStatus(st);
      const int64_t delay = backoff.NextDelayMs();
      Log(absl::StrCat("list trials failed: ", st.error_message(), "; retry in ", delay, " ms"));
      shared_.SleepUnlessStopping(absl::Milliseconds(delay));
    }
  }

  // Waits until the spool holds no pending trial of `run_id`. False on timeout, stop (for
  // an infinite timeout) or lease loss.
  bool WaitUploaded(int64_t run_id, absl::Duration timeout) {
    upload_cv_.notify_all();
    const absl::Time until = absl::Now() + timeout;
    while (spool_->PendingForRun(run_id) > 0) {
      if (absl::Now() >= until || lease_lost_.load()) return false;
      if (timeout == absl::InfiniteDuration() && shared_.stopping()) return false;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return true;
  }

  void Complete(int64_t job_id, bool success, const std::string& error) {
    completing_.store(true);
    struct Reset {
      std::atomic<bool>& flag;
      ~Reset() { flag.store(false); }
    } reset{completing_};
    Backoff backoff(shared_.options.backoff);
    while (true) {
      v1::CompleteJobRequest req;
      req.set_worker_id(worker_id_);
      req.set_job_id(job_id);
      req.set_success(success);
      req.set_error(error.substr(0, kMaxTextLength));
      v1::CompleteJobResponse resp;
      grpc::ClientContext ctx;
      shared_.Prepare(ctx, absl::Seconds(30));
      grpc::Status st = shared_.worker_stub->CompleteJob(&ctx, req, &resp);
      shared_.Done(ctx);
      if (st.ok()) {
        (success ? shared_.jobs_completed : shared_.jobs_failed).fetch_add(1);
        Log(absl::StrCat("job ", job_id, success ? " completed" : absl::StrCat(" failed: ", error)));
        return;
      }
      // Only transport trouble is worth retrying; the server refusing (the lease lapsed and
      // the job went to another worker) is final. A retry after a lost reply is answered OK
      // (completion is idempotent for the same worker).
      if (st.error_code() != grpc::StatusCode::UNAVAILABLE &&
          st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED &&
          st.error_code() != grpc::StatusCode::CANCELLED) {
        shared_.jobs_lost.fetch_add(1);
        Log(absl::StrCat("job ", job_id, ": completion refused: ", st.error_message()));
        return;
      }
      if (shared_.stopping() && backoff.attempt() > 5) {
        Log(absl::StrCat("job ", job_id, ": could not complete before shutdown; the lease will lapse"));
        return;
      }
      const int64_t delay = backoff.NextDelayMs();
      absl::SleepFor(absl::Milliseconds(delay));  // not cut short by a stop: finishing matters
    }
  }

  void Release(int64_t job_id, const std::string& why) {
    v1::ReleaseJobRequest req;
    req.set_worker_id(worker_id_);
    req.set_job_id(job_id);
    v1::ReleaseJobResponse resp;
    grpc::ClientContext ctx;
    shared_.Prepare(ctx, absl::Seconds(5));
    grpc::Status st = shared_.worker_stub->ReleaseJob(&ctx, req, &resp);
    shared_.Done(ctx);
    shared_.jobs_released.fetch_add(1);
    if (st.ok()) {
      Log(absl::StrCat("job ", job_id, " released (", why, ")"));
    } else {
      Log(absl::StrCat("job ", job_id, " not released (", st.error_message(), "); its lease will lapse (", why, ")"));
    }
  }

  void MarkDeviceFailed() {
    needs_new_backend_ = true;
    device_failed_until_ = absl::Now() + shared_.options.device_retry;
  }

  // ---- heartbeat and watchdog
  void HeartbeatLoop() {
    int64_t last_beat = 0;
    while (!threads_stop_.load()) {
      absl::SleepFor(absl::Milliseconds(20));
      if (!ever_registered_.load()) continue;
      const int64_t now = NowUnixMs();
      int64_t job_id;
      {
        std::lock_guard<std::mutex> lock(job_mu_);
        job_id = job_id_;
      }
      // Watchdog: one trial running for longer than the timeout is a hung device.
      if (job_id != 0 && sweep_running_.load() && !hung_.load() &&
          now - last_trial_ms_.load() > watchdog_limit_ms_.load()) {
        hung_.store(true);
        cancel_.store(true);
        shared_.device_failures.fetch_add(1);
        Log(absl::StrCat("watchdog: no ", audit_running_.load() ? "audit" : "trial", " finished in ",
                         absl::FormatDuration(absl::Milliseconds(watchdog_limit_ms_.load())),
                         "; device considered hung, releasing job ", job_id));
        Release(job_id, "device hung");
        ReturnReservation();
        std::lock_guard<std::mutex> lock(job_mu_);
        job_id_ = 0;
        continue;
      }
      if (now - last_beat < heartbeat_ms_.load()) continue;
      last_beat = now;
      v1::HeartbeatRequest req;
      req.set_worker_id(worker_id_);
      req.set_job_id(hung_.load() ? 0 : job_id);
      v1::HeartbeatResponse resp;
      grpc::ClientContext ctx;
      shared_.Prepare(ctx, absl::Milliseconds(std::max<int64_t>(500, heartbeat_ms_.load())));
      grpc::Status st = shared_.worker_stub->Heartbeat(&ctx, req, &resp);
      shared_.Done(ctx);
      if (ErrorReason(FromGrpcCall(st, ctx)) == kReasonWorkerNotRegistered) {
        Register();  // the server does not know us (e.g. a fresh database)
        continue;
      }
      if (!st.ok()) continue;  // the service is away: keep working, the spool holds results
      if (job_id != 0 && !resp.lease_valid()) {
        std::lock_guard<std::mutex> lock(job_mu_);
        if (job_id_ == job_id && !completing_.load()) {  // a completed job is no longer leased
          Log(absl::StrCat("heartbeat: lease of job ", job_id, " no longer valid; cancelling its sweep"));
          lease_lost_.store(true);
          cancel_.store(true);
        }
      }
    }
  }

  // ---- uploads
  size_t UploadablePending() {
    absl::flat_hash_set<int64_t> parked = ParkedRuns();
    return spool_->PendingWhere(static_cast<size_t>(-1), [&](const Trial& t) { return !parked.contains(t.run_id); })
        .size();
  }

  // Runs whose trials wait for this device to hold them again; forgets parks older than
  // kParkRetry, so they are tried once more now and then.
  absl::flat_hash_set<int64_t> ParkedRuns() {
    std::lock_guard<std::mutex> lock(job_mu_);
    absl::flat_hash_set<int64_t> out;
    for (auto it = parked_runs_.begin(); it != parked_runs_.end();) {
      auto next = std::next(it);
      if (absl::Now() - it->second > kParkRetry) {
        parked_runs_.erase(it);
      } else {
        out.insert(it->first);
      }
      it = next;
    }
    return out;
  }

  void UploadLoop() {
    Backoff backoff(shared_.options.backoff, std::hash<std::string>{}(worker_id_) + 2);
    absl::Time retry_at = absl::InfinitePast();
    while (!threads_stop_.load()) {
      {
        std::unique_lock<std::mutex> lock(upload_mu_);
        upload_cv_.wait_for(lock, std::chrono::milliseconds(200));
      }
      if (!ever_registered_.load() || absl::Now() < retry_at) continue;
      // Oldest pending trials first (skipping parked runs), one stream per run.
      absl::flat_hash_set<int64_t> parked = ParkedRuns();
      std::vector<Trial> pending =
          spool_->PendingWhere(4 * kUploadBatch, [&](const Trial& t) { return !parked.contains(t.run_id); });
      if (pending.empty()) continue;
      absl::flat_hash_map<int64_t, std::vector<Trial>> by_run;
      std::vector<int64_t> order;
      for (Trial& t : pending) {
        auto& v = by_run[t.run_id];
        if (v.empty()) order.push_back(t.run_id);
        if (v.size() < static_cast<size_t>(kUploadBatch)) v.push_back(std::move(t));
      }
      bool failed = false;
      for (int64_t run : order) {
        absl::Status st = UploadRun(by_run[run]);
        if (st.ok()) continue;
        if (ErrorReason(st) == kReasonWorkerNotRegistered) {
          Register();  // a server that lost our registration: register again, then retry
          failed = true;
          break;
        }
        if (absl::IsFailedPrecondition(st) || absl::IsPermissionDenied(st) || absl::IsNotFound(st)) {
          bool held;
          {
            std::lock_guard<std::mutex> lock(job_mu_);
            held = run == run_id_;
          }
          // Another worker may have finished that job, re-measuring the same configs under the
          // same trial ids: what the server already has needs no upload from us.
          if (!held) AcknowledgeAlreadyStored(run);
          std::lock_guard<std::mutex> lock(job_mu_);
          if (run != run_id_) {
            parked_runs_[run] = absl::Now();
            Log(absl::StrCat("server refuses trials of run ", run, " (", StatusText(st),
                             "); kept in the spool until this device holds that run again"));
            continue;
          }
        }
        failed = true;
        Log(absl::StrCat("upload failed: ", StatusText(st)));
        break;
      }
      if (failed) {
        retry_at = absl::Now() + absl::Milliseconds(backoff.NextDelayMs());
      } else {
        backoff.Reset();
        retry_at = absl::InfinitePast();
        upload_cv_.notify_all();  // more may be pending beyond this batch
      }
    }
  }

  // Acknowledges the pending trials of `run` that the server already stores.
  void AcknowledgeAlreadyStored(int64_t run) {
    v1::ListTrialsRequest req;
    req.set_run_id(run);
    req.set_limit(kListTrialsLimit);
    v1::ListTrialsResponse resp;
    grpc::ClientContext ctx;
    shared_.Prepare(ctx, absl::Seconds(30));
    if (!shared_.tuning_stub->ListTrials(&ctx, req, &resp).ok()) return;
    absl::flat_hash_set<std::string> stored;
    for (const v1::Trial& t : resp.trials()) stored.insert(t.trial_id());
    std::vector<std::string> ids;
    for (const Trial& t : spool_->PendingWhere(static_cast<size_t>(-1), [&](const Trial& t) {
           return t.run_id == run && stored.contains(t.trial_id);
         })) {
      ids.push_back(t.trial_id);
    }
    if (ids.empty()) return;
    if (spool_->Acknowledge(ids).ok()) {
      Log(absl::StrCat(ids.size(), " spooled trials of run ", run, " are already stored (measured again by ",
                       "the job's next holder); dropped from the spool"));
    }
  }

  // One ReportTrials stream for trials of one run; acknowledges them in the spool on OK.
  absl::Status UploadRun(const std::vector<Trial>& trials) {
    grpc::ClientContext ctx;
    shared_.Prepare(ctx, absl::Seconds(30));
    ctx.AddMetadata("x-fusetune-worker-id", worker_id_);
    v1::ReportTrialsResponse resp;
    std::unique_ptr<grpc::ClientWriter<v1::Trial>> writer = shared_.worker_stub->ReportTrials(&ctx, &resp);
    for (const Trial& t : trials) {
      v1::Trial p;
      TrialToProto(t, &p);
      if (!writer->Write(p)) break;  // the server ended the stream; Finish says why
    }
    writer->WritesDone();
    grpc::Status st = writer->Finish();
    shared_.Done(ctx);
    if (st.ok()) {
      std::vector<std::string> ids;
      for (const Trial& t : trials) ids.push_back(t.trial_id);
      if (absl::Status s = spool_->Acknowledge(ids); !s.ok()) return s;
      shared_.trials_uploaded.fetch_add(static_cast<int64_t>(trials.size()));
      return absl::OkStatus();
    }
    if (st.error_code() == grpc::StatusCode::INVALID_ARGUMENT && trials.size() > 1) {
      // Find the malformed one(s): upload one by one, so the rest still go through.
      for (const Trial& t : trials) {
        absl::Status s = UploadRun({t});
        if (!s.ok()) return s;
      }
      return absl::OkStatus();
    }
    if (st.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      // A single trial the server will never accept: keeping it would block the spool.
      shared_.trials_rejected.fetch_add(1);
      Log(absl::StrCat("server rejected trial ", trials[0].trial_id, " as malformed: ", st.error_message(),
                       "; dropped from the spool"));
      std::vector<std::string> ids = {trials[0].trial_id};
      return spool_->Acknowledge(ids);
    }
    return FromGrpcCall(st, ctx);
  }

  const std::shared_ptr<Shared> shared_owner_;
  Shared& shared_;
  const int slot_;
  const int device_index_;
  const std::string worker_id_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<TrialSpool> spool_;
  const int thread_cap_;  // > 0: CPU threads this slot may use
  DeviceInfo info_;
  std::string device_class_;

  std::atomic<int64_t> lease_ms_{kDefaultLeaseMs};
  std::atomic<int64_t> heartbeat_ms_{kDefaultLeaseMs / 3};
  std::atomic<bool> ever_registered_{false};
  std::atomic<bool> main_done_{false};
  std::atomic<bool> threads_stop_{false};

  // The job in progress (0 = none) and the runs whose trials the server refused to take
  // from this device (parked until the device holds that run again).
  std::mutex job_mu_;
  int64_t job_id_ = 0;
  int64_t run_id_ = 0;
  absl::flat_hash_map<int64_t, absl::Time> parked_runs_;

  std::atomic<bool> cancel_{false};
  std::atomic<bool> lease_lost_{false};
  std::atomic<bool> hung_{false};
  std::atomic<bool> device_error_{false};  // a streak of launch failures
  std::atomic<bool> holds_reservation_{false};
  std::atomic<bool> completing_{false};  // CompleteJob in flight for the current job  // the running job counts toward max_jobs
  std::atomic<bool> sweep_running_{false};
  std::atomic<bool> sweep_done_{false};
  std::atomic<int64_t> last_trial_ms_{0};
  // How long the running measurement may go without progress before the device counts as
  // hung: one trial's timeout for a sweep (progress = a trial), a whole audit's bound for an
  // audit (RunAudit reports nothing until it returns).
  std::atomic<int64_t> watchdog_limit_ms_{0};
  std::atomic<bool> audit_running_{false};
  bool needs_new_backend_ = false;          // main thread only
  absl::Time device_failed_until_ = absl::InfinitePast();  // main thread (and watchdog: benign)

  std::mutex upload_mu_;
  std::condition_variable upload_cv_;

  std::thread main_, uploader_, heartbeat_;
};

// ----------------------------------------------------------------------------- Worker

Worker::Worker(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

void Worker::RequestStop() { shared_->stop.store(true, std::memory_order_relaxed); }

Worker::~Worker() = default;

absl::StatusOr<std::unique_ptr<Worker>> Worker::Create(WorkerOptions options) {
  // A malformed address is a usage error now, not an endless reconnect loop later.
  if (absl::Status s = ValidateServiceAddress(options.server, "--server"); !s.ok()) return s;
  if (options.spool_dir.empty()) return absl::InvalidArgumentError("--spool is required (a directory)");
  if (options.lease_wait_ms < 0 || options.lease_wait_ms > 30000) {
    return absl::InvalidArgumentError("--lease-wait-ms must be in [0, 30000]");
  }
  if (options.max_jobs < 0) return absl::InvalidArgumentError("--max-jobs must be >= 0");
  if (options.cpu_devices < 0 || options.cpu_devices > 64) {
    return absl::InvalidArgumentError("--cpu-devices must be in [0, 64]");
  }
  if (options.cpu_devices > 0 && options.backend != "cpu") {
    return absl::InvalidArgumentError("--cpu-devices needs --backend cpu");
  }
  if (options.host.empty()) {
    char name[256] = {};
    options.host = ::gethostname(name, sizeof(name) - 1) == 0 ? name : "unknown";
  }
  if (options.worker_id.empty()) {
    for (char c : options.host) {
      options.worker_id.push_back(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ? c : '_');
    }
  }
  if (absl::Status s = ValidateId(absl::StrCat(options.worker_id, "-d00"), "worker_id"); !s.ok()) return s;
  std::error_code ec;
  std::filesystem::create_directories(options.spool_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create spool dir ", options.spool_dir, ": ", ec.message()));

  // Which device slots to drive.
  std::vector<int> slots;
  int thread_cap = 0;
  if (options.cpu_devices > 0) {
    for (int i = 0; i < options.cpu_devices; ++i) slots.push_back(i);
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    thread_cap = std::max(1, hw / options.cpu_devices);
  } else if (!options.devices.empty()) {
    slots = options.devices;
  } else {
    const int n = CountDevices(options.backend);
    if (n <= 0) return absl::UnavailableError(absl::StrCat("no ", options.backend, " device on this host"));
    for (int i = 0; i < n; ++i) slots.push_back(i);
  }
  for (int s : slots) {
    if (s < 0 || s > 99) return absl::InvalidArgumentError(absl::StrCat("device index ", s, " out of range"));
  }
  if (!options.backend_factory) {
    const bool cpu_slots = options.cpu_devices > 0;
    const std::string backend = options.backend;
    options.backend_factory = [cpu_slots, backend](int index) -> absl::StatusOr<std::unique_ptr<Backend>> {
      if (cpu_slots) return CreateCpuBackend();  // independent instances of the one CPU
      return CreateBackend(backend, index);
    };
  }

  auto shared = std::make_shared<Shared>();
  // gRPC's own reconnect backoff is bounded by the worker's, so that a restarted server is
  // seen within backoff.max_ms.
  grpc::ChannelArguments args = ReconnectChannelArguments(options.backoff.initial_ms, options.backoff.max_ms);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (options.tls_root_certs.empty()) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_root_certs;
    creds = grpc::SslCredentials(ssl);
  }
  shared->channel = grpc::CreateCustomChannel(options.server, creds, args);
  shared->worker_stub = v1::WorkerService::NewStub(shared->channel);
  shared->tuning_stub = v1::TuningService::NewStub(shared->channel);
  shared->options = options;

  std::unique_ptr<Worker> worker(new Worker(std::move(shared)));
  for (size_t i = 0; i < slots.size(); ++i) {
    const int slot = slots[i];
    absl::StatusOr<std::unique_ptr<Backend>> backend = worker->shared_->options.backend_factory(slot);
    if (!backend.ok()) {
      return absl::UnavailableError(absl::StrCat("device ", slot, ": ", backend.status().message()));
    }
    const std::string spool_path =
        (std::filesystem::path(options.spool_dir) / absl::StrCat(options.worker_id, "-d", slot, ".spool")).string();
    absl::StatusOr<std::unique_ptr<TrialSpool>> spool = TrialSpool::Open(spool_path);
    if (!spool.ok()) return spool.status();
    worker->devices_.push_back(std::make_unique<DeviceRunner>(worker->shared_, slot, slot, *std::move(backend),
                                                              *std::move(spool), thread_cap));
  }
  return worker;
}

absl::Status Worker::Run() {
  shared_->Log(absl::StrCat("worker ", shared_->options.worker_id, ": ", devices_.size(), " device(s), server ",
                            shared_->options.server));
  for (auto& d : devices_) d->Start();
  // Cancel long polls at once on a stop; otherwise wait for the devices to finish.
  while (true) {
    bool all_done = true;
    const bool ending = shared_->stopping() || shared_->max_jobs_done();
    for (auto& d : devices_) all_done = all_done && (d->main_done() || (ending && d->hung()));
    if (all_done) break;
    if (ending) shared_->CancelAllCalls();
    absl::SleepFor(absl::Milliseconds(20));
  }
  bool any_registered = false;
  for (auto& d : devices_) {
    any_registered = any_registered || d->ever_registered();
    if (!d->Join(absl::Seconds(1))) {
      shared_->Log(absl::StrCat("[", d->worker_id(), "] still hung in a kernel at exit; abandoned"));
      d.release();  // its detached thread may still touch it
    }
  }
  const WorkerStats s = stats();
  shared_->Log(absl::StrCat("worker exiting: ", s.jobs_completed, " jobs completed, ", s.jobs_released,
                            " released, ", s.trials_recorded, " trials recorded, ", s.trials_uploaded, " uploaded"));
  if (!any_registered && !shared_->stopping()) return absl::UnavailableError("no device could register");
  return absl::OkStatus();
}

WorkerStats Worker::stats() const {
  WorkerStats s;
  s.jobs_completed = shared_->jobs_completed.load();
  s.jobs_failed = shared_->jobs_failed.load();
  s.jobs_released = shared_->jobs_released.load();
  s.jobs_lost = shared_->jobs_lost.load();
  s.trials_recorded = shared_->trials_recorded.load();
  s.trials_uploaded = shared_->trials_uploaded.load();
  s.trials_rejected = shared_->trials_rejected.load();
  s.device_failures = shared_->device_failures.load();
  s.devices = static_cast<int>(devices_.size());
  return s;
}

std::vector<std::string> Worker::device_worker_ids() const {
  std::vector<std::string> out;
  for (const auto& d : devices_) out.push_back(d->worker_id());
  return out;
}

std::vector<std::string> Worker::spool_paths() const {
  std::vector<std::string> out;
  for (const auto& d : devices_) out.push_back(d->spool_path());
  return out;
}

}  // namespace fusetune
