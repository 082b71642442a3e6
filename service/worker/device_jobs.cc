// Running one leased job on a device: a tune job (RunSweep over the lease's problems) or an
// audit job (RunAudit of each problem's recorded best config).
#include <algorithm>
#include <functional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "device_runner.h"
#include "fusetune/base/backoff.h"
#include "fusetune/wire/records_convert.h"
#include "fusetune/wire/status.h"
#include "launch_failure_streak.h"

namespace fusetune::worker_internal {
namespace {

constexpr int kListTrialsLimit = 10000;  // resume lookup: the server's maximum

std::string Took(absl::Duration d) { return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(1))); }

}  // namespace

// The sink a tune job's sweep records into. Every trial is progress for the watchdog; one a
// hung device returns after the watchdog gave the job up is dropped; the rest go through the
// launch-failure streak (a streak marks the device failed) to the uploader's spool.
class DeviceRunner::SpoolSink : public RecordSink {
 public:
  // `known`: the run's trials on the server and in the spool when the job started
  // (KnownTrials, read before the watchdog is armed: a slow server is not a hung device, and
  // a failed read releases the job instead of resting the device).
  SpoolSink(DeviceRunner& d, int64_t run_id, std::vector<Trial> known)
      : d_(d), run_id_(run_id), known_(std::move(known)), streak_(*d.uploader_, d.ctx_->options().device_error_streak, [&d](const Trial& last) {
          d.Log(absl::StrCat(d.ctx_->options().device_error_streak, " launch failures in a row (last: ",
                             last.message, "); device considered failed"));
          d.job_.DeviceFailed();
        }) {}

  absl::Status RecordTrial(const Trial& trial) override {
    d_.job_.NoteProgress();
    if (d_.job_.abandoned()) return absl::OkStatus();
    absl::Status s = streak_.RecordTrial(trial);
    if (const absl::Duration delay = d_.ctx_->options().testing_trial_delay; delay > absl::ZeroDuration()) {
      absl::SleepFor(delay);
      d_.job_.NoteProgress();
    }
    return s;
  }
  absl::StatusOr<std::vector<Trial>> RecordedTrials(int64_t run_id) override {
    if (run_id != run_id_) {
      return absl::InternalError(absl::StrCat("the job's sink holds run ", run_id_, ", not run ", run_id));
    }
    return known_;
  }
  // Never called: the worker's sweeps run without selection (SweepOptionsFor sets
  // select_best false), because the server selects the job's best configs from the uploaded
  // trials when the job completes, and that selection is the authority.
  absl::Status RecordBestConfig(const BestConfig&) override { return absl::OkStatus(); }
  // Records the launch failures still held back when the sweep ended.
  absl::Status Flush() { return streak_.Flush(); }

 private:
  DeviceRunner& d_;
  const int64_t run_id_;
  const std::vector<Trial> known_;
  LaunchFailureStreakSink streak_;
};

bool DeviceRunner::RunJob(const v1::LeaseJobResponse& lease) {
  const int64_t job_id = lease.job().job_id();
  const int64_t run_id = lease.job().run_id();
  Log(absl::StrCat("leased job ", job_id, " (run ", run_id, ", attempt ", lease.job().attempts(), ", ",
                   lease.problems_size(), " problems)"));
  lease_token_.store(lease.job().lease_token());
  Check(job_.Hold(job_id));
  if (run_id <= 0) {
    Release(job_id, "lease carried no run id");
    return false;
  }
  uploader_->SetLeaseToken(run_id, lease.job().lease_token());
  uploader_->HoldRun(run_id);
  const bool completed = RunHeldJob(lease);
  uploader_->HoldRun(0);
  return completed;
}

// The job's problems and options; an unrunnable job is failed, not retried forever.
bool DeviceRunner::RunHeldJob(const v1::LeaseJobResponse& lease) {
  const int64_t job_id = lease.job().job_id();
  std::vector<AttentionProblem> problems;
  for (const v1::Problem& p : lease.problems()) {
    absl::StatusOr<AttentionProblem> problem = JobProblemFromProto(p);
    if (!problem.ok()) {
      Complete(job_id, false, absl::StrCat("bad problem: ", problem.status().message()));
      return true;
    }
    problems.push_back(*std::move(problem));
  }
  absl::StatusOr<SweepOptions> options = SweepOptionsFor(lease);
  if (!options.ok() || problems.empty()) {
    Complete(job_id, false, options.ok() ? "job without problems" : std::string(options.status().message()));
    return true;
  }
  if (lease.job().kind() == v1::JOB_KIND_AUDIT) return RunAuditJob(lease, problems, *options);
  if (lease.job().kind() != v1::JOB_KIND_TUNE) {
    Complete(job_id, false, absl::StrCat("unknown job kind ", static_cast<int>(lease.job().kind()),
                                         " (this worker runs tune and audit jobs)"));
    return true;
  }
  return RunTuneJob(lease, problems, *options);
}

bool DeviceRunner::RunTuneJob(const v1::LeaseJobResponse& lease, const std::vector<AttentionProblem>& problems,
                              const SweepOptions& options) {
  const int64_t job_id = lease.job().job_id();
  const int64_t run_id = lease.job().run_id();
  // Resume: what the server already stored for this run, plus what our spool holds.
  absl::StatusOr<std::vector<Trial>> known = KnownTrials(run_id);
  if (!known.ok()) {
    Log(absl::StrCat("cannot read the run's trials: ", known.status().ToString(), "; releasing"));
    Release(job_id, "resume lookup failed");
    return false;
  }
  const size_t resumed = known->size();

  SpoolSink sink(*this, run_id, *std::move(known));
  const absl::Time t0 = absl::Now();
  Check(job_.StartMeasuring(ctx_->options().trial_timeout, "trial"));
  absl::StatusOr<SweepResult> result = RunSweep(
      *backend_, problems, options, run_id, sink,
      [&](const SweepProgress& p) {
        Log(absl::StrCat("job ", job_id, " problem ", p.problem_index + 1, "/", p.problem_count, " ", p.problem_key,
                         ": ", p.trials_measured, " measured, ", p.trials_resumed, " resumed, ", p.trials_ok, " ok"));
      },
      job_.cancel_token());
  Check(job_.FinishMeasuring());
  // A streak in progress was no device failure after all: its trials are the configs' own.
  if (job_.cause() <= StopCause::kStop) {
    if (absl::Status flushed = sink.Flush(); result.ok() && !flushed.ok()) result = flushed;
  }
  return FinishTuneJob(job_id, run_id, std::move(result), resumed, absl::Now() - t0);
}

bool DeviceRunner::FinishTuneJob(int64_t job_id, int64_t run_id, absl::StatusOr<SweepResult> result,
                                 size_t resumed, absl::Duration took) {
  switch (job_.cause()) {
    case StopCause::kHung:  // the watchdog released the job; a fresh backend comes later
      Log(absl::StrCat("job ", job_id, ": sweep returned after the watchdog gave the job up"));
      MarkDeviceFailed();
      return false;
    case StopCause::kLeaseLost:
      Log(absl::StrCat("job ", job_id, ": lease taken back by the server; dropping it"));
      ctx_->jobs_lost.fetch_add(1);
      return false;
    case StopCause::kDeviceError:
      FailDevice(job_id, run_id, "");
      return false;
    case StopCause::kStop:
    case StopCause::kNone:
      break;
  }
  if (!result.ok()) {
    FailDevice(job_id, run_id, absl::StrCat("sweep failed: ", result.status().ToString()));
    return false;
  }
  const bool complete = !result->cancelled;
  Log(absl::StrCat("job ", job_id, ": sweep ", complete ? "finished" : "stopped", " in ", Took(took), " (",
                   result->trials_measured, " measured, ", result->trials_resumed, " resumed of ", resumed,
                   " known)"));
  if (!complete) {  // stopping: give the job back with everything measured so far
    ReleaseAfterUpload(job_id, run_id, "worker shutting down");
    return false;
  }
  // Every trial must be on the server before the job may complete (completion recomputes
  // the best configs from the stored trials).
  if (!UploadedOrJobOver(job_id, run_id)) return false;
  Complete(job_id, true, "");
  return true;
}

// An audit job: for each problem, its recorded best config (from the lease) re-measured
// against the problem's space with RunAudit; the audit's trials go through the spool and
// the uploader like a sweep's, then its summary goes to ReportAudit. A problem that cannot
// be audited (nothing recorded, or the recorded config does not verify here) is named in
// the job's error and the others still run; the job fails when any problem did.
bool DeviceRunner::RunAuditJob(const v1::LeaseJobResponse& lease, const std::vector<AttentionProblem>& problems,
                               const SweepOptions& sweep) {
  if (lease.recorded_config_keys_size() != static_cast<int>(problems.size())) {
    Complete(lease.job().job_id(), false,
             absl::StrCat("audit lease carries ", lease.recorded_config_keys_size(), " recorded configs for ",
                          problems.size(), " problems"));
    return true;
  }
  AuditOptions audit;
  audit.space = sweep.space;
  audit.runner = sweep.runner;
  audit.seed = ctx_->options().search_seed;
  AuditTally tally;
  bool stopped = false;
  for (size_t i = 0; i < problems.size() && !job_.cancelled(); ++i) {
    const AuditStep step = AuditProblem(lease, static_cast<int>(i), problems[i], audit, tally);
    if (step == AuditStep::kJobOver) return false;
    if (step == AuditStep::kStopped) {
      stopped = true;
      break;
    }
  }
  return FinishAuditJob(lease, problems.size(), stopped, tally);
}

DeviceRunner::AuditStep DeviceRunner::AuditProblem(const v1::LeaseJobResponse& lease, int index,
                                                   const AttentionProblem& problem, const AuditOptions& audit,
                                                   AuditTally& tally) {
  const int64_t job_id = lease.job().job_id();
  const int64_t run_id = lease.job().run_id();
  const std::string key = problem.Key();
  const std::string& recorded_key = lease.recorded_config_keys(index);
  if (recorded_key.empty()) {
    tally.failures.push_back(
        absl::StrCat(key, ": no best config recorded on ", lease.job().device_class(), " (tune it first)"));
    Log(absl::StrCat("job ", job_id, " ", tally.failures.back()));
    return AuditStep::kNext;
  }
  absl::StatusOr<KernelConfig> recorded = KernelConfig::FromKey(recorded_key);
  if (!recorded.ok()) {
    tally.failures.push_back(absl::StrCat(key, ": recorded config '", recorded_key, "': ", recorded.status().message()));
    return AuditStep::kNext;
  }
  if (AlreadyAudited(run_id, lease.job().device_class(), key)) {  // a resumed job
    ++tally.audited;
    return AuditStep::kNext;
  }
  // The watchdog allows the whole audit (RunAudit reports only when done): every candidate
  // once, then the rounds.
  const int64_t measurements = std::max<int64_t>(1, static_cast<int64_t>(backend_->CandidateConfigs(problem).size())) +
                               int64_t{audit.rounds} * (audit.max_contenders + 1);
  const absl::Time t0 = absl::Now();
  Check(job_.StartMeasuring(measurements * ctx_->options().trial_timeout, "audit"));
  absl::StatusOr<AuditResult> result = RunAudit(*backend_, problem, *recorded, audit, run_id, job_.cancel_token());
  Check(job_.FinishMeasuring());

  if (job_.cause() == StopCause::kHung) {
    Log(absl::StrCat("job ", job_id, ": audit returned after the watchdog gave the job up"));
    MarkDeviceFailed();
    return AuditStep::kJobOver;
  }
  if (job_.cause() == StopCause::kLeaseLost) {
    Log(absl::StrCat("job ", job_id, ": lease taken back by the server; dropping it"));
    ctx_->jobs_lost.fetch_add(1);
    return AuditStep::kJobOver;
  }
  if (absl::IsCancelled(result.status())) return AuditStep::kStopped;  // stopping: released below
  if (absl::IsFailedPrecondition(result.status()) || absl::IsInvalidArgument(result.status())) {
    tally.failures.push_back(absl::StrCat(key, ": ", result.status().message()));
    Log(absl::StrCat("job ", job_id, " cannot audit ", tally.failures.back()));
    return AuditStep::kNext;
  }
  absl::Status spooled = result.status();
  for (size_t t = 0; spooled.ok() && t < result->trials.size(); ++t) spooled = uploader_->RecordTrial(result->trials[t]);
  if (!spooled.ok()) {
    FailDevice(job_id, run_id, absl::StrCat("audit of ", key, " failed: ", spooled.ToString()));
    return AuditStep::kJobOver;
  }
  AuditSummary summary = result->summary;
  summary.run_id = run_id;
  summary.device_class = lease.job().device_class();
  summary.problem_key = key;
  summary.recorded_config_key = recorded_key;
  summary.commit = lease.job().commit();
  Log(absl::StrCat("job ", job_id, " audited ", key, " in ", Took(absl::Now() - t0), ": recorded ", recorded_key, " ",
                   summary.recorded_us, " us, best ", summary.best_config_key, " ", summary.best_us, " us, regret ",
                   100 * summary.regret, "% [", 100 * summary.regret_low, ", ", 100 * summary.regret_high, "]"));
  return ReportAuditOf(lease, recorded_key, std::move(summary), tally);
}

DeviceRunner::AuditStep DeviceRunner::ReportAuditOf(const v1::LeaseJobResponse& lease,
                                                    const std::string& recorded_key, AuditSummary summary,
                                                    AuditTally& tally) {
  const int64_t job_id = lease.job().job_id();
  const int64_t run_id = lease.job().run_id();
  // The summary refers to its trials: they go first.
  if (!UploadedOrJobOver(job_id, run_id)) return AuditStep::kJobOver;
  absl::Status reported = ReportAudit(job_id, summary);
  if (reported.ok()) {
    ++tally.audited;
    return AuditStep::kNext;
  }
  if (absl::IsInvalidArgument(reported)) {
    tally.failures.push_back(absl::StrCat(summary.problem_key, ": audit refused by the server: ", reported.message()));
    return AuditStep::kNext;
  }
  if (absl::IsFailedPrecondition(reported) || absl::IsNotFound(reported)) {
    ctx_->jobs_lost.fetch_add(1);
    Log(absl::StrCat("job ", job_id, ": audit report refused (", reported.ToString(), "); dropping the job"));
    return AuditStep::kJobOver;
  }
  // Transport trouble until shutdown: another holder audits the rest.
  ReleaseAfterUpload(job_id, run_id, absl::StrCat("audit report failed: ", reported.message()));
  return AuditStep::kJobOver;
}

bool DeviceRunner::FinishAuditJob(const v1::LeaseJobResponse& lease, size_t problems, bool stopped,
                                  const AuditTally& tally) {
  const int64_t job_id = lease.job().job_id();
  if (stopped || job_.cancelled()) {
    if (job_.cause() == StopCause::kLeaseLost) {
      ctx_->jobs_lost.fetch_add(1);
      Log(absl::StrCat("job ", job_id, ": lease taken back by the server; dropping it"));
      return false;
    }
    ReleaseAfterUpload(job_id, lease.job().run_id(), "worker shutting down");
    return false;
  }
  Log(absl::StrCat("job ", job_id, ": ", tally.audited, " of ", problems, " problems audited"));
  if (tally.failures.empty()) {
    Complete(job_id, true, "");
  } else {
    Complete(job_id, false,
             absl::StrCat(tally.failures.size(), " of ", problems, " problems not audited: ",
                          absl::StrJoin(tally.failures, "; ")));
  }
  return true;
}

// True when the server already holds this run's audit of `problem_key` (the job was
// resumed after another holder's lease lapsed). False when not, or when it cannot tell:
// the audit is then measured again, and ReportAudit answers the stored one.
bool DeviceRunner::AlreadyAudited(int64_t run_id, const std::string& device_class, const std::string& problem_key) {
  v1::ListAuditsRequest req;
  req.set_device_class(device_class);
  req.set_problem_key(problem_key);
  req.set_limit(1000);
  v1::ListAuditsResponse resp;
  grpc::ClientContext ctx;
  ctx_->Prepare(ctx, absl::Seconds(30));
  grpc::Status st = ctx_->tuning_stub().ListAudits(&ctx, req, &resp);
  ctx_->Done(ctx);
  if (!st.ok()) return false;
  for (const v1::AuditSummary& a : resp.audits()) {
    if (a.run_id() == run_id) return true;
  }
  return false;
}

// ReportAudit, retried (backoff) while the service is unreachable; the server's answer
// otherwise. Gives up after a few tries once the worker is stopping.
absl::Status DeviceRunner::ReportAudit(int64_t job_id, const AuditSummary& summary) {
  Backoff backoff(ctx_->options().backoff);
  while (true) {
    v1::ReportAuditRequest req;
    req.set_worker_id(worker_id_);
    req.set_job_id(job_id);
    req.set_lease_token(lease_token_.load());
    AuditSummaryToProto(summary, req.mutable_audit());
    v1::ReportAuditResponse resp;
    grpc::ClientContext ctx;
    ctx_->Prepare(ctx, absl::Seconds(30));
    grpc::Status st = ctx_->worker_stub().ReportAudit(&ctx, req, &resp);
    ctx_->Done(ctx);
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
    if (job_.cause() == StopCause::kLeaseLost || (ctx_->stopping() && backoff.attempt() > 5)) return status;
    const int64_t delay = backoff.NextDelayMs();
    Log(absl::StrCat("report audit failed: ", st.error_message(), "; retry in ", delay, " ms"));
    absl::SleepFor(absl::Milliseconds(delay));
  }
}

absl::StatusOr<SweepOptions> DeviceRunner::SweepOptionsFor(const v1::LeaseJobResponse& lease) const {
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
  o.seed = ctx_->options().search_seed;
  o.max_trials_per_variant = std::max(0, lease.max_trials());
  o.max_seconds_per_problem = std::max(0.0, lease.max_seconds());
  o.runner.trial_time_limit_seconds = absl::ToDoubleSeconds(ctx_->options().trial_timeout);
  o.commit = lease.job().commit();
  // The server selects at CompleteJob from the stored trials; selecting here too was wasted.
  o.select_best = false;
  return o;
}

// What is already measured for the run: the server's trials plus the local spool's.
absl::StatusOr<std::vector<Trial>> DeviceRunner::KnownTrials(int64_t run_id) {
  std::vector<Trial> known = spool_->TrialsForRun(run_id);
  absl::flat_hash_set<std::string> ids;
  for (const Trial& t : known) ids.insert(t.trial_id);
  Backoff backoff(ctx_->options().backoff);
  while (true) {
    v1::ListTrialsRequest req;
    req.set_run_id(run_id);
    req.set_limit(kListTrialsLimit);
    v1::ListTrialsResponse resp;
    grpc::ClientContext ctx;
    ctx_->Prepare(ctx, absl::Seconds(30));
    grpc::Status st = ctx_->tuning_stub().ListTrials(&ctx, req, &resp);
    ctx_->Done(ctx);
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
    if (ctx_->stopping() || job_.cause() == StopCause::kLeaseLost) return FromGrpcStatus(st);
    const int64_t delay = backoff.NextDelayMs();
    Log(absl::StrCat("list trials failed: ", st.error_message(), "; retry in ", delay, " ms"));
    ctx_->SleepUnlessStopping(absl::Milliseconds(delay));
  }
}

}  // namespace fusetune::worker_internal
