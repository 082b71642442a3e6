#include "server_core.h"

#include <algorithm>
#include <utility>

#include "fusetune/base/strings.h"
#include "fusetune/base/time.h"
#include "fusetune/records/commit.h"
#include "fusetune/tuner/selection.h"
#include "fusetune/wire/status.h"

namespace fusetune {
namespace {

constexpr int kTrialFlushBatch = 256;
// Large enough for every leased job, audit or worker one database holds in practice.
constexpr int kScanLimit = 100000;
// Newest verdicts read for the regression gauges each refresh: the latest comparison of every
// cell of a few suites (the series are capped at kMaxShapeSeries anyway).
constexpr int kLatestVerdictsRead = 10000;

// Runs of one suite are read newest first across device classes: enough for the history of
// 8 device classes benched alike.
constexpr int kBenchRunsRead = kBenchHistoryCommits * 8;

// The newest run of each of the last kBenchHistoryCommits commits per (device class, suite),
// with its cells of that suite; positions count from the newest.
absl::StatusOr<std::vector<BenchHistoryRun>> ReadBenchHistory(Store& store) {
  absl::StatusOr<std::vector<std::string>> suites = store.ListBenchSuites();
  if (!suites.ok()) return suites.status();
  std::vector<BenchHistoryRun> history;
  for (const std::string& suite : *suites) {
    absl::StatusOr<std::vector<RunInfo>> runs = store.ListBenchRuns(suite, "", kBenchRunsRead);
    if (!runs.ok()) return runs.status();
    std::map<std::string, std::set<std::string>> commits_by_class;
    for (RunInfo& run : *runs) {
      std::set<std::string>& kept = commits_by_class[run.device.DeviceClass()];
      if (kept.size() >= static_cast<size_t>(kBenchHistoryCommits) || !kept.insert(run.commit).second) continue;
      absl::StatusOr<std::vector<BenchCell>> cells = store.ListBenchCells(run.run_id);
      if (!cells.ok()) return cells.status();
      std::erase_if(*cells, [&](const BenchCell& c) { return c.suite != suite; });
      const int position = static_cast<int>(kept.size()) - 1;
      history.push_back({run.device.DeviceClass(), suite, position, std::move(run), std::move(*cells)});
    }
  }
  return history;
}

// The stored change points (Store::ListChangePoints, newest detection first) as the metrics
// mark them: at their commit's bench run's finish time.
absl::StatusOr<std::vector<ChangePointMark>> StoredChangePoints(Store& store) {
  absl::StatusOr<std::vector<ChangePointRow>> rows = store.ListChangePoints({}, static_cast<int>(kMaxAnnotationSeries));
  if (!rows.ok()) return rows.status();
  std::vector<ChangePointMark> marks;
  for (const ChangePointRow& r : *rows) {
    marks.push_back({r.device_class, r.suite, r.problem_key, r.config_key, r.commit, r.direction, 0});
  }
  return marks;
}

absl::Status WorkerNotRegistered(const std::string& worker_id) {
  return WithErrorReason(
      absl::FailedPreconditionError(Cat("worker '", worker_id, "' is not registered (RegisterWorker first)")),
      kReasonWorkerNotRegistered);
}

}  // namespace

ServerCore::ServerCore(const ServerOptions& options, std::unique_ptr<Store> store, ServiceMetrics* metrics)
    : options_(options),
      store_(std::move(store)),
      metrics_(metrics),
      index_(std::make_shared<const BestConfigIndex>()) {}

ServerCore::~ServerCore() {
  BeginShutdown();
  StopRefresh();
}

// ------------------------------------------------------------------------------ lifecycle

absl::Status ServerCore::Init() {
  auto workers = store_->ListWorkers();
  if (!workers.ok()) return workers.status();
  {
    std::lock_guard<std::mutex> lock(workers_mu_);
    for (auto& w : *workers) workers_[w.worker_id] = std::move(w);
  }
  ExpireLeases();
  // The first stamp before the first snapshot: a change made after the stamp was read shows
  // as a changed stamp at the next poll, whether or not the snapshot already holds it.
  if (auto stamp = store_->ReadSharedStateStamp(); stamp.ok()) stamp_ = *stamp;
  RefreshIndex();
  RefreshGauges();
  RefreshHistory();
  return absl::OkStatus();
}

void ServerCore::StartRefresh() {
  refresher_ = std::thread([this] { RefreshLoop(); });
}

void ServerCore::BeginShutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutting_down_ = true;
  cv_.notify_all();
}

void ServerCore::StopRefresh() {
  if (refresher_.joinable()) refresher_.join();
}

void ServerCore::WaitForShutdown() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return shutting_down_; });
}

void ServerCore::RefreshLoop() {
  // Two periods: the shared-state poll (replica_poll_ms, cheap) and the full refresh
  // (refresh_ms: lease expiry, the snapshot, gauges and bench history).
  using Clock = std::chrono::steady_clock;
  const auto poll = std::chrono::milliseconds(std::min(options_.replica_poll_ms, options_.refresh_ms));
  auto next_refresh = Clock::now() + std::chrono::milliseconds(options_.refresh_ms);
  std::unique_lock<std::mutex> lock(mu_);
  while (!shutting_down_) {
    cv_.wait_for(lock, poll, [&] { return shutting_down_; });
    if (shutting_down_) break;
    lock.unlock();
    if (Clock::now() >= next_refresh) {
      next_refresh = Clock::now() + std::chrono::milliseconds(options_.refresh_ms);
      ExpireLeases();
      RefreshIndex();
      RefreshGauges();
      RefreshHistory();
    }
    PollSharedState();
    lock.lock();
  }
}

void ServerCore::PollSharedState() {
  absl::StatusOr<SharedStateStamp> stamp = store_->ReadSharedStateStamp();
  if (!stamp.ok()) return;  // the database is away: keep serving what we have, poll again
  const bool first = !stamp_.has_value();
  if (!first && !stamp->SameBestConfigs(*stamp_)) RefreshIndex();
  // A job submitted, released or expired through another replica: the long-polls here ask
  // the store again (a spurious wake costs one lease query per waiting worker).
  if (!first && !stamp->SameQueue(*stamp_)) NotifyQueue();
  stamp_ = *stamp;
}

void ServerCore::ExpireLeases() {
  // The database's clock decides expiry, so servers sharing a database agree on it.
  auto n = store_->ExpireLeases(kDatabaseClock);
  if (n.ok() && *n > 0) NotifyQueue();
}

void ServerCore::RefreshIndex() {
  // Load and swap under one lock: a refresh that read the table before an upsert can never
  // replace the snapshot of a refresh that read it after.
  std::lock_guard<std::mutex> refresh_lock(refresh_mu_);
  auto best = store_->ListBestConfigs();
  if (!best.ok()) return;  // keep serving the previous snapshot
  metrics_->SetBestConfigs(*best);
  auto index = std::make_shared<const BestConfigIndex>(BestConfigIndex::Build(std::move(*best)));
  std::lock_guard<std::mutex> lock(index_mu_);
  index_ = std::move(index);
}

void ServerCore::RefreshGauges() {
  if (auto counts = store_->CountJobsByState(); counts.ok()) {
    std::vector<std::pair<std::string, int64_t>> by_state;
    for (const auto& [state, n] : *counts) by_state.emplace_back(std::string(JobStateName(state)), n);
    metrics_->SetJobCounts(by_state);
  }
  if (auto workers = store_->ListWorkers(); workers.ok()) {
    const int64_t now = NowUnixMs();
    int64_t alive = 0;
    for (const auto& w : *workers) {
      if (now - w.last_heartbeat_unix_ms <= options_.worker_alive_ms) ++alive;
    }
    metrics_->SetWorkers(static_cast<int64_t>(workers->size()), alive);
  }
  if (auto verdicts = store_->ListRegressions({}, kLatestVerdictsRead); verdicts.ok()) {
    metrics_->SetLatestVerdicts(*verdicts);
    metrics_->SetRegressionAnnotations(*verdicts);
  }
}

void ServerCore::RefreshHistory() {
  absl::StatusOr<std::vector<BenchHistoryRun>> history = ReadBenchHistory(*store_);
  if (!history.ok()) return;  // keep the previous series; the change points need the history's times
  metrics_->SetBenchHistory(*history);
  absl::StatusOr<std::vector<ChangePointMark>> marks =
      options_.list_change_points ? options_.list_change_points(*store_) : StoredChangePoints(*store_);
  if (marks.ok()) metrics_->SetChangePoints(*marks, *history);
}

void ServerCore::NotifyQueue() {
  std::lock_guard<std::mutex> lock(mu_);
  ++queue_generation_;
  cv_.notify_all();
}

void ServerCore::WakeLongPolls() {
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

std::optional<WorkerRecord> ServerCore::FindWorker(const std::string& worker_id) {
  {
    std::lock_guard<std::mutex> lock(workers_mu_);
    auto it = workers_.find(worker_id);
    if (it != workers_.end()) return it->second;
  }
  // Registered through another replica of the service (or before this one started): the
  // database knows it, so a worker that fails over need not register again.
  auto workers = store_->ListWorkers();
  if (!workers.ok()) return std::nullopt;
  std::lock_guard<std::mutex> lock(workers_mu_);
  for (WorkerRecord& w : *workers) workers_.try_emplace(w.worker_id, std::move(w));
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return std::nullopt;
  return it->second;
}

absl::Status ServerCore::CheckRegistered(const std::string& worker_id) {
  return FindWorker(worker_id) ? absl::OkStatus() : WorkerNotRegistered(worker_id);
}

// ------------------------------------------------------------------------------ TuningService

absl::StatusOr<BestConfigAnswer> ServerCore::GetBestConfig(const AttentionProblem& problem,
                                                           std::string_view device_class) const {
  std::shared_ptr<const BestConfigIndex> index;
  {
    std::lock_guard<std::mutex> lock(index_mu_);
    index = index_;
  }
  return index->Lookup(problem, device_class);
}

absl::StatusOr<int64_t> ServerCore::SubmitJob(Job job) {
  job.created_unix_ms = NowUnixMs();
  auto id = store_->EnqueueJob(job);
  if (!id.ok()) return id.status();
  NotifyQueue();
  RefreshGauges();
  return *id;
}

absl::StatusOr<Job> ServerCore::GetJob(int64_t job_id) { return store_->GetJob(job_id); }

absl::StatusOr<int64_t> ServerCore::CountTrials(int64_t run_id) { return store_->CountTrials(run_id); }

absl::StatusOr<std::vector<Job>> ServerCore::ListJobs(std::optional<JobState> state, int limit) {
  return store_->ListJobs(state, limit);
}

absl::StatusOr<std::vector<Trial>> ServerCore::ListTrials(int64_t run_id, const std::string& problem_key,
                                                          const std::string& device_class, int limit) {
  if (run_id > 0) return store_->ListTrials(run_id, problem_key);
  return store_->ListTrialsForProblem(device_class, problem_key, limit);
}

absl::StatusOr<std::optional<std::string>> ServerCore::ResolveCommitFilter(const std::string& commit) {
  if (commit.empty()) return commit;
  absl::StatusOr<CommitName> named = ParseCommitName(commit);
  if (!named.ok() || named->kind != CommitNameKind::kAbbreviation) return commit;
  absl::StatusOr<std::vector<std::string>> known = store_->CommitsStartingWith(named->text);
  if (!known.ok()) return known.status();
  absl::StatusOr<std::string> resolved = ResolveCommitName(named->text, *known, "the server's database");
  if (absl::IsNotFound(resolved.status())) return std::nullopt;
  if (!resolved.ok()) return absl::InvalidArgumentError(Cat("commit: ", resolved.status().message()));
  return *std::move(resolved);
}

absl::StatusOr<std::vector<Regression>> ServerCore::ListRegressions(const std::string& commit, int limit) {
  absl::StatusOr<std::optional<std::string>> resolved = ResolveCommitFilter(commit);
  if (!resolved.ok()) return resolved.status();
  if (!*resolved) return std::vector<Regression>{};
  return store_->ListRegressions(**resolved, limit);
}

absl::StatusOr<std::vector<ChangePointRow>> ServerCore::ListChangePoints(ChangePointFilter filter, int limit) {
  absl::StatusOr<std::optional<std::string>> resolved = ResolveCommitFilter(filter.commit);
  if (!resolved.ok()) return resolved.status();
  if (!*resolved) return std::vector<ChangePointRow>{};
  filter.commit = **std::move(resolved);
  return store_->ListChangePoints(filter, limit);
}

absl::StatusOr<int> ServerCore::ReportRegressions(const std::vector<Regression>& rows) {
  auto recorded = store_->RecordRegressions(rows);
  if (!recorded.ok()) return recorded.status();
  RefreshGauges();
  return *recorded;
}

absl::StatusOr<std::vector<AuditSummary>> ServerCore::ListAudits(const std::string& device_class,
                                                                 const std::string& problem_key, int limit) {
  return store_->ListAudits(device_class, problem_key, limit);
}

absl::StatusOr<std::vector<WorkerView>> ServerCore::ListWorkers(int64_t now_unix_ms) {
  auto workers = store_->ListWorkers();
  if (!workers.ok()) return workers.status();
  auto leased = store_->ListJobs(JobState::kLeased, kScanLimit);
  if (!leased.ok()) return leased.status();
  std::map<std::string, std::vector<Job>> held;  // worker id -> its leased jobs
  for (Job& j : *leased) held[j.leased_by].push_back(std::move(j));
  std::vector<WorkerView> views;
  views.reserve(workers->size());
  for (WorkerRecord& w : *workers) {
    WorkerView view;
    view.alive = now_unix_ms - w.last_heartbeat_unix_ms <= options_.worker_alive_ms;
    if (auto it = held.find(w.worker_id); it != held.end()) {
      view.leased_jobs = std::move(it->second);
      std::sort(view.leased_jobs.begin(), view.leased_jobs.end(),
                [](const Job& a, const Job& b) { return a.job_id < b.job_id; });
    }
    view.record = std::move(w);
    views.push_back(std::move(view));
  }
  std::sort(views.begin(), views.end(),
            [](const WorkerView& a, const WorkerView& b) { return a.record.worker_id < b.record.worker_id; });
  return views;
}

// ------------------------------------------------------------------------------ WorkerService

absl::Status ServerCore::RegisterWorker(WorkerRecord worker) {
  const int64_t now = NowUnixMs();
  worker.registered_unix_ms = now;
  worker.last_heartbeat_unix_ms = now;
  if (auto s = store_->UpsertWorker(worker); !s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(workers_mu_);
    workers_[worker.worker_id] = std::move(worker);
  }
  RefreshGauges();
  return absl::OkStatus();
}

absl::StatusOr<std::optional<JobLease>> ServerCore::LeaseJob(const std::string& worker_id,
                                                             const std::string& device_class, int64_t wait_ms,
                                                             const LongPollCaller& caller) {
  auto worker = FindWorker(worker_id);
  if (!worker) return WorkerNotRegistered(worker_id);
  if (!device_class.empty() && device_class != worker->device_class) {
    if (auto s = ValidateDeviceClass(device_class); !s.ok()) return s;
    return absl::FailedPreconditionError(Cat("device_class '", device_class,
                                             "' differs from the worker's registered '", worker->device_class, "'"));
  }
  // The wait ends after wait_ms or at the caller's own deadline, whichever comes first.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  if (const auto caller_deadline = caller.deadline(); caller_deadline != std::chrono::system_clock::time_point::max()) {
    deadline = std::min(deadline, std::chrono::steady_clock::now() +
                                      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                          caller_deadline - std::chrono::system_clock::now()));
  }
  uint64_t tried_generation = 0;
  bool tried = false;
  while (true) {
    uint64_t generation;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shutting_down_) return std::optional<JobLease>();
      generation = queue_generation_;
    }
    // Never take a job for a caller that cannot receive it.
    if (caller.gone()) return caller.GoneStatus();
    // The store is asked again only when the queue may have changed (a submit, a release,
    // or leases expired by the background refresh all bump the generation).
    if (!tried || generation != tried_generation) {
      tried = true;
      tried_generation = generation;
      auto lease = TryLease(*worker);
      if (!lease.ok() || lease->has_value()) return lease;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::optional<JobLease>();
    // Woken by a queue change, a shutdown or the call's cancellation (WakeLongPolls).
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, deadline, [&] {
      return shutting_down_ || queue_generation_ != tried_generation || caller.gone();
    });
  }
}

absl::StatusOr<std::optional<JobLease>> ServerCore::TryLease(const WorkerRecord& worker) {
  auto job = store_->LeaseJob(worker.worker_id, worker.device_class, kDatabaseClock, options_.lease_ms);
  if (absl::IsNotFound(job.status())) return std::optional<JobLease>();
  if (!job.ok()) return job.status();
  auto lease = PrepareLease(std::move(*job), worker);
  if (!lease.ok()) return lease.status();
  return std::optional<JobLease>(std::move(*lease));
}

absl::StatusOr<JobLease> ServerCore::PrepareLease(Job job, const WorkerRecord& worker) {
  JobLease lease;
  auto spec = JobSpec(job);
  if (!spec.ok()) {
    // A spec that cannot be read will never run: fail the job rather than lease it forever.
    (void)store_->CompleteJob(job.job_id, worker.worker_id, job.lease_token, false, "stored job spec is unreadable",
                              kDatabaseClock);
    return spec.status();
  }
  lease.spec = std::move(*spec);
  // An audit re-measures the best config recorded now: looked up at each lease, so a job
  // resumed after a lapse audits what the store holds then.
  if (lease.spec.kind() == v1::JOB_KIND_AUDIT) {
    for (const std::string& key : job.problem_keys) {
      auto best = store_->GetBestConfig(job.device_class, key);
      if (best.ok()) {
        lease.recorded_config_keys.push_back(best->config_key);
      } else if (absl::IsNotFound(best.status())) {
        lease.recorded_config_keys.emplace_back();
      } else {
        (void)store_->ReleaseJob(job.job_id, worker.worker_id, job.lease_token);
        NotifyQueue();
        return best.status();
      }
    }
  }
  if (job.run_id == 0) {
    auto run_id = BeginJobRun(job, worker);
    if (!run_id.ok()) {
      (void)store_->ReleaseJob(job.job_id, worker.worker_id, job.lease_token);
      NotifyQueue();
      return run_id.status();
    }
    job.run_id = *run_id;
  }
  {
    std::lock_guard<std::mutex> lock(runs_mu_);
    run_to_job_[job.run_id] = job.job_id;
  }
  (void)store_->TouchWorker(worker.worker_id, NowUnixMs());
  lease.job = std::move(job);
  RefreshGauges();
  return lease;
}

absl::StatusOr<int64_t> ServerCore::BeginJobRun(const Job& job, const WorkerRecord& worker) {
  RunInfo run;
  run.commit = job.commit;
  run.host = worker.host;
  if (auto device = WorkerDevice(worker); device.ok()) run.device = *device;
  run.tool_version = FUSETUNE_VERSION_STRING;
  run.label = Cat("job:", job.job_id);
  run.environment = Cat("worker:", worker.worker_id);
  run.started_unix_ms = NowUnixMs();
  auto run_id = store_->BeginRun(run);
  if (!run_id.ok()) return run_id.status();
  if (auto s = store_->SetJobRun(job.job_id, *run_id); !s.ok()) return s;
  return *run_id;
}

void ServerCore::ReturnUndeliveredLease(int64_t job_id, const std::string& worker_id, int64_t lease_token) {
  // FailedPrecondition: the lease already ended otherwise (expired, or released): nothing to do.
  if (store_->ReleaseJob(job_id, worker_id, lease_token).ok()) {
    NotifyQueue();
    RefreshGauges();
  }
}

absl::StatusOr<bool> ServerCore::Heartbeat(const std::string& worker_id, int64_t job_id, int64_t lease_token) {
  if (!FindWorker(worker_id)) return WorkerNotRegistered(worker_id);
  const int64_t now = NowUnixMs();
  if (auto s = store_->TouchWorker(worker_id, now); !s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(workers_mu_);
    if (auto it = workers_.find(worker_id); it != workers_.end()) it->second.last_heartbeat_unix_ms = now;
  }
  if (job_id == 0) return false;
  absl::Status renewed = store_->RenewLease(job_id, worker_id, lease_token, kDatabaseClock, options_.lease_ms);
  if (renewed.ok()) return true;
  if (absl::IsFailedPrecondition(renewed) || absl::IsNotFound(renewed)) return false;
  return renewed;
}

// Whether `worker_id` holds `job`'s lease under `lease_token` (any token for kNoLeaseToken).
static bool HeldBy(const Job& job, const std::string& worker_id, int64_t lease_token) {
  return job.state == JobState::kLeased && job.leased_by == worker_id &&
         (lease_token == kNoLeaseToken || lease_token == job.lease_token);
}

absl::StatusOr<Job> ServerCore::JobOfRunHeldBy(int64_t run_id, const std::string& worker_id, int64_t lease_token) {
  std::optional<int64_t> job_id;
  {
    std::lock_guard<std::mutex> lock(runs_mu_);
    if (auto it = run_to_job_.find(run_id); it != run_to_job_.end()) job_id = it->second;
  }
  if (!job_id) {
    // Leased before this server started: look through the leased jobs once.
    auto leased = store_->ListJobs(JobState::kLeased, kScanLimit);
    if (!leased.ok()) return leased.status();
    std::lock_guard<std::mutex> lock(runs_mu_);
    for (const Job& j : *leased) {
      if (j.run_id > 0) run_to_job_[j.run_id] = j.job_id;
      if (j.run_id == run_id) job_id = j.job_id;
    }
  }
  if (job_id) {
    auto job = store_->GetJob(*job_id);
    if (!job.ok()) return job.status();
    if (HeldBy(*job, worker_id, lease_token)) return job;
    if (lease_token != kNoLeaseToken && lease_token != job->lease_token && job->leased_by == worker_id) {
      return absl::FailedPreconditionError(Cat("run ", run_id, ": lease token ", lease_token, " of job ", *job_id,
                                               " is stale (the job was leased again, token ", job->lease_token,
                                               "); trials of the old lease are refused"));
    }
  }
  return absl::FailedPreconditionError(
      Cat("run ", run_id, " is not the run of a job leased by worker '", worker_id, "'"));
}

absl::Status ServerCore::RecordNewTrials(std::vector<Trial>* batch, int64_t* inserted) {
  // The store writes each trial id once (a stored id is skipped, not an error) and counts the
  // rows it wrote, so no lookup per trial is needed here.
  std::vector<Trial> trials = std::move(*batch);
  batch->clear();
  if (trials.empty()) return absl::OkStatus();
  absl::StatusOr<int> written = store_->RecordTrialsCountingNew(trials);
  if (!written.ok()) return written.status();
  *inserted += *written;
  return absl::OkStatus();
}

absl::Status ServerCore::TrialUpload::Add(Trial trial, int64_t number) {
  auto run = run_problems_.find(trial.run_id);
  if (run == run_problems_.end()) {
    auto job = core_->JobOfRunHeldBy(trial.run_id, worker_id_, lease_token_);
    if (!job.ok()) return job.status();
    run = run_problems_
              .emplace(trial.run_id, std::set<std::string>(job->problem_keys.begin(), job->problem_keys.end()))
              .first;
  }
  if (run->second.count(trial.problem_key) == 0) {
    return absl::InvalidArgumentError(Cat("trial #", number, ": problem '", trial.problem_key,
                                          "' is not part of run ", trial.run_id, "'s job"));
  }
  batch_.push_back(std::move(trial));
  if (batch_.size() >= kTrialFlushBatch) return Flush();
  return absl::OkStatus();
}

absl::Status ServerCore::TrialUpload::Flush() { return core_->RecordNewTrials(&batch_, &inserted_); }

absl::Status ServerCore::ComputeBestConfigs(const Job& job) {
  auto run = store_->GetRun(job.run_id);
  if (!run.ok()) return run.status();
  for (const std::string& key : job.problem_keys) {
    auto trials = store_->ListTrials(job.run_id, key);
    if (!trials.ok()) return trials.status();
    if (trials->empty()) continue;
    auto best = SelectBest(*trials, job.device_class, job.run_id, run->commit);
    if (absl::IsNotFound(best.status())) continue;  // nothing verified: nothing to serve
    if (!best.ok()) return best.status();
    best->updated_unix_ms = NowUnixMs();
    if (auto s = store_->UpsertBestConfig(*best); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ServerCore::CompleteJob(const std::string& worker_id, int64_t job_id, int64_t lease_token, bool success,
                                     const std::string& error) {
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  if (HeldBy(*job, worker_id, lease_token)) {
    // Best configs first: if this server dies in between, the job is still leased and the
    // worker's retry recomputes them; never a "done" job without its best configs.
    // An audit measures the recorded best configs; it does not replace them.
    if (success && job->run_id > 0 && JobKindOf(*job) == v1::JOB_KIND_TUNE) {
      if (auto s = ComputeBestConfigs(*job); !s.ok()) return s;
    }
    if (job->run_id > 0) (void)store_->FinishRun(job->run_id);
    // Served before the job reads as done: a caller that waits for "done" and then asks
    // GetBestConfig gets the job's configs, never the previous snapshot.
    RefreshIndex();
  }
  // The store decides exactly-once: OK the first time, OK for the same worker's retry,
  // FailedPrecondition otherwise.
  if (auto s = store_->CompleteJob(job_id, worker_id, lease_token, success, error, kDatabaseClock); !s.ok()) return s;
  RefreshGauges();
  return absl::OkStatus();
}

absl::Status ServerCore::CheckAuditAgainstJob(const Job& job, const std::string& worker_id, int64_t lease_token,
                                              AuditSummary* audit) {
  if (JobKindOf(job) != v1::JOB_KIND_AUDIT) {
    return absl::FailedPreconditionError(Cat("job ", job.job_id, " is not an audit job"));
  }
  if (!HeldBy(job, worker_id, lease_token)) {
    return absl::FailedPreconditionError(Cat("job ", job.job_id, " is not leased by worker '", worker_id, "'",
                                             lease_token == kNoLeaseToken ? "" : Cat(" under lease token ", lease_token)));
  }
  // The job decides where the audit belongs; a summary naming anything else is a client bug.
  if (audit->run_id != 0 && audit->run_id != job.run_id) {
    return absl::InvalidArgumentError(
        Cat("audit.run_id: ", audit->run_id, " is not job ", job.job_id, "'s run ", job.run_id));
  }
  if (!audit->device_class.empty() && audit->device_class != job.device_class) {
    return absl::InvalidArgumentError(
        Cat("audit.device_class: '", audit->device_class, "' is not the job's '", job.device_class, "'"));
  }
  if (!audit->commit.empty() && audit->commit != job.commit) {
    return absl::InvalidArgumentError(Cat("audit.commit: '", audit->commit, "' is not the job's '", job.commit, "'"));
  }
  if (std::find(job.problem_keys.begin(), job.problem_keys.end(), audit->problem_key) == job.problem_keys.end()) {
    return absl::InvalidArgumentError(
        Cat("audit.problem_key: '", audit->problem_key, "' is not a problem of job ", job.job_id));
  }
  audit->run_id = job.run_id;
  audit->device_class = job.device_class;
  audit->commit = job.commit;
  if (audit->created_unix_ms == 0) audit->created_unix_ms = NowUnixMs();
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ServerCore::ReportAudit(const std::string& worker_id, int64_t job_id, int64_t lease_token,
                                                AuditSummary audit) {
  if (!FindWorker(worker_id)) return WorkerNotRegistered(worker_id);
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  if (auto s = CheckAuditAgainstJob(*job, worker_id, lease_token, &audit); !s.ok()) return s;
  // A retried report (its reply lost) must not store a second audit of the same measurement.
  auto existing = store_->ListAudits(audit.device_class, audit.problem_key, kScanLimit);
  if (!existing.ok()) return existing.status();
  for (const AuditSummary& a : *existing) {
    if (a.run_id == audit.run_id) return a.audit_id;
  }
  return store_->RecordAudit(audit);
}

absl::Status ServerCore::ReleaseJob(const std::string& worker_id, int64_t job_id, int64_t lease_token) {
  if (auto s = store_->ReleaseJob(job_id, worker_id, lease_token); !s.ok()) return s;
  NotifyQueue();
  RefreshGauges();
  return absl::OkStatus();
}

}  // namespace fusetune
