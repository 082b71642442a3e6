// ServerCore: the tuning service's state over the Store, with no gRPC in it: the job queue
// and its long-poll wake-ups, leases, registered workers, trial uploads, completion (with
// the best configs it derives), audits, and the best-config snapshot refreshed in the
// background. The two gRPC services (tuning_service.cc, worker_service.cc) validate and map
// requests through the wire library, call this, and convert its absl::Status once at the
// RPC edge (rpc_edge.h).
//
// A status carrying the error reason kReasonWorkerNotRegistered (fusetune/wire/status.h)
// means the named worker is not registered; the RPC edge sends that reason to the caller.
//
// Thread-safety: every method is safe to call concurrently from the RPC threads, except
// Init and StartRefresh (once, before serving) and StopRefresh (once, after serving ended).
// ServerOptions::list_change_points runs on the refresh thread (and in Init).
#ifndef FUSETUNE_SERVICE_SERVER_CORE_H_
#define FUSETUNE_SERVICE_SERVER_CORE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/db/store.h"
#include "fusetune/kernels/problem.h"
#include "fusetune/service/best_config_index.h"
#include "fusetune/service/server.h"
#include "fusetune/wire/records_convert.h"
#include "metrics.h"

namespace fusetune {

// The caller of a long-poll, as the core sees it: whether anyone will read the reply.
class LongPollCaller {
 public:
  virtual ~LongPollCaller() = default;
  // True once nobody will read the reply (cancelled, disconnected, deadline passed).
  virtual bool gone() const = 0;
  // Why the caller is gone: Cancelled or DeadlineExceeded.
  virtual absl::Status GoneStatus() const = 0;
  // The caller's own deadline (time_point::max() when it set none).
  virtual std::chrono::system_clock::time_point deadline() const = 0;
};

// A registered worker as ListWorkers shows it.
struct WorkerView {
  WorkerRecord record;
  bool alive = false;              // heartbeat within worker_alive_ms
  std::vector<Job> leased_jobs;    // the jobs it holds, by job id
};

class ServerCore {
 public:
  ServerCore(const ServerOptions& options, std::unique_ptr<Store> store, ServiceMetrics* metrics);
  ~ServerCore();
  ServerCore(const ServerCore&) = delete;
  ServerCore& operator=(const ServerCore&) = delete;

  // Loads the registered workers, expires stale leases, builds the first snapshot.
  absl::Status Init();
  // Starts the background refresh (lease expiry, snapshot, gauges and bench history every
  // refresh_ms).
  void StartRefresh();
  // Ends every long-poll (they answer "no job") and makes WaitForShutdown return.
  void BeginShutdown();
  // Joins the background refresh (after BeginShutdown).
  void StopRefresh();
  void WaitForShutdown();

  const ServerOptions& options() const { return options_; }
  Store* store() { return store_.get(); }

  // ---- TuningService
  // The snapshot's answer for a validated problem and device class.
  absl::StatusOr<BestConfigAnswer> GetBestConfig(const AttentionProblem& problem,
                                                 std::string_view device_class) const;
  // Queues a job (JobFromSubmitRequest); its id.
  absl::StatusOr<int64_t> SubmitJob(Job job);
  absl::StatusOr<Job> GetJob(int64_t job_id);  // NotFound when there is none
  absl::StatusOr<int64_t> CountTrials(int64_t run_id);
  absl::StatusOr<std::vector<Job>> ListJobs(std::optional<JobState> state, int limit);
  // A run's trials (run_id > 0, optionally of one problem), else at most `limit` trials of
  // `problem_key` on `device_class` across runs.
  absl::StatusOr<std::vector<Trial>> ListTrials(int64_t run_id, const std::string& problem_key,
                                                const std::string& device_class, int limit);
  // Filtered by commit (empty: all): a canonical commit name, or an abbreviation resolved
  // against the commits the store holds (Store::CommitsStartingWith). An abbreviation of no
  // stored commit selects nothing; one of several is InvalidArgument naming them.
  absl::StatusOr<std::vector<Regression>> ListRegressions(const std::string& commit, int limit);
  absl::StatusOr<std::vector<ChangePointRow>> ListChangePoints(ChangePointFilter filter, int limit);
  // Stores verdicts (RegressionsFromReportRequest) in one transaction (Store::RecordRegressions:
  // all or none) and then refreshes the verdict gauges; returns how many were stored.
  absl::StatusOr<int> ReportRegressions(const std::vector<Regression>& rows);
  absl::StatusOr<std::vector<AuditSummary>> ListAudits(const std::string& device_class,
                                                       const std::string& problem_key, int limit);
  // Every registered worker, by worker id.
  absl::StatusOr<std::vector<WorkerView>> ListWorkers(int64_t now_unix_ms);

  // ---- WorkerService
  // Registers (or re-registers) a worker (WorkerFromRegisterRequest; timestamps set here).
  absl::Status RegisterWorker(WorkerRecord worker);
  // FailedPrecondition with kReasonWorkerNotRegistered unless `worker_id` is registered.
  absl::Status CheckRegistered(const std::string& worker_id);
  // Long-polls for a job of the worker's device class for up to `wait_ms` (and never past
  // the caller's deadline). nullopt: no job in time, or shutting down. A job is never taken
  // for a caller that is gone (its GoneStatus is returned).
  absl::StatusOr<std::optional<JobLease>> LeaseJob(const std::string& worker_id, const std::string& device_class,
                                                   int64_t wait_ms, const LongPollCaller& caller);
  // Puts a job leased for a reply that could not be delivered straight back in the queue.
  void ReturnUndeliveredLease(int64_t job_id, const std::string& worker_id, int64_t lease_token);
  // Wakes every waiting long-poll (a caller went away).
  void WakeLongPolls();
  // Records the heartbeat; true when `job_id` (0: idle) is still leased by the worker under
  // `lease_token` (kNoLeaseToken: any of its leases), and then renews it.
  absl::StatusOr<bool> Heartbeat(const std::string& worker_id, int64_t job_id, int64_t lease_token);

  // One ReportTrials stream of one worker: checks each trial's run and problem against the
  // worker's leases (under `lease_token` when the stream names one) and records new trials
  // in batches (a trial id already stored is skipped).
  class TrialUpload {
   public:
    // `number` is the trial's position in the stream (for messages).
    absl::Status Add(Trial trial, int64_t number);
    // Records what is still batched.
    absl::Status Flush();
    int64_t inserted() const { return inserted_; }

   private:
    friend class ServerCore;
    TrialUpload(ServerCore* core, std::string worker_id, int64_t lease_token)
        : core_(core), worker_id_(std::move(worker_id)), lease_token_(lease_token) {}
    ServerCore* core_;
    std::string worker_id_;
    int64_t lease_token_;
    std::map<int64_t, std::set<std::string>> run_problems_;  // runs checked -> their job's problems
    std::vector<Trial> batch_;
    int64_t inserted_ = 0;
  };
  TrialUpload BeginTrialUpload(const std::string& worker_id, int64_t lease_token = kNoLeaseToken) {
    return TrialUpload(this, worker_id, lease_token);
  }

  // Completes a job exactly once (the store decides); a successful tune job's best configs
  // are derived and stored first. A stale `lease_token` (the job was leased again) is
  // FailedPrecondition and changes nothing.
  absl::Status CompleteJob(const std::string& worker_id, int64_t job_id, int64_t lease_token, bool success,
                           const std::string& error);
  // Stores the audit of a leased audit job (once per run); its audit id.
  absl::StatusOr<int64_t> ReportAudit(const std::string& worker_id, int64_t job_id, int64_t lease_token,
                                      AuditSummary audit);
  absl::Status ReleaseJob(const std::string& worker_id, int64_t job_id, int64_t lease_token);

 private:
  // A commit filter as ListRegressions says: the commit it selects; nullopt for none.
  absl::StatusOr<std::optional<std::string>> ResolveCommitFilter(const std::string& commit);
  void RefreshLoop();
  // Reads the database's SharedStateStamp; reloads the best configs and wakes the long-polls
  // when another replica (or this one) changed them since the last read.
  void PollSharedState();
  void RefreshIndex();
  void RefreshGauges();
  // The bench history and change-point series: read in the background refresh only (they
  // cost a read of up to kBenchHistoryCommits runs per suite, too much for every RPC).
  void RefreshHistory();
  void ExpireLeases();
  void NotifyQueue();
  std::optional<WorkerRecord> FindWorker(const std::string& worker_id);
  // Tries the store once for a job; nullopt when none is queued.
  absl::StatusOr<std::optional<JobLease>> TryLease(const WorkerRecord& worker);
  // Prepares a freshly leased job: creates its run on the first lease, reads its spec.
  absl::StatusOr<JobLease> PrepareLease(Job job, const WorkerRecord& worker);
  // Creates the run of a job leased for the first time.
  absl::StatusOr<int64_t> BeginJobRun(const Job& job, const WorkerRecord& worker);
  // The job whose run is `run_id`, when leased by `worker_id`.
  absl::StatusOr<Job> JobOfRunHeldBy(int64_t run_id, const std::string& worker_id, int64_t lease_token);
  // Records `batch` (emptied) in one store transaction; adds to `inserted` how many were new
  // (a trial id already stored is skipped, as is a second copy within the batch).
  absl::Status RecordNewTrials(std::vector<Trial>* batch, int64_t* inserted);
  absl::Status ComputeBestConfigs(const Job& job);
  // The audit's fields checked against its job, then filled from it.
  absl::Status CheckAuditAgainstJob(const Job& job, const std::string& worker_id, int64_t lease_token,
                                    AuditSummary* audit);

  const ServerOptions options_;
  std::unique_ptr<Store> store_;
  ServiceMetrics* const metrics_;

  // Best-config snapshot, swapped whole.
  std::mutex refresh_mu_;  // serialises RefreshIndex
  mutable std::mutex index_mu_;
  std::shared_ptr<const BestConfigIndex> index_;

  // Queue wake-ups and shutdown.
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t queue_generation_ = 0;
  bool shutting_down_ = false;

  std::mutex workers_mu_;
  std::map<std::string, WorkerRecord> workers_;
  std::mutex runs_mu_;
  std::map<int64_t, int64_t> run_to_job_;

  // The last stamp read (refresh thread only).
  std::optional<SharedStateStamp> stamp_;

  std::thread refresher_;
};

}  // namespace fusetune

#endif  // FUSETUNE_SERVICE_SERVER_CORE_H_
