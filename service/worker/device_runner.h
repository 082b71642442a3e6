// DeviceRunner: one device of a Worker (internal to the worker library).
//
// Threads: main (MainLoop: register, upload what an earlier life left in the spool, then
// lease and run one job at a time), heartbeat (renews the lease, learns of a lost lease,
// and is the watchdog) and the Uploader's. What a job is doing lives in its JobState; the
// runner's methods are the steps, and each step says which transition it makes.
//
// Files: device_runner.cc (threads, registration, leasing, the job RPCs), device_jobs.cc
// (running a tune or audit job).
//
// Thread-safety: Start, Join and the queries are for the Worker's thread; OnStop for the
// stop relay. The rest runs on the runner's own threads.
#ifndef FUSETUNE_WORKER_DEVICE_RUNNER_H_
#define FUSETUNE_WORKER_DEVICE_RUNNER_H_

#include <cstdint>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/proto/fusetune.grpc.pb.h"
#include "fusetune/records/run.h"
#include "fusetune/tuner/audit.h"
#include "fusetune/tuner/sweep.h"
#include "fusetune/worker/spool.h"
#include "job_state.h"
#include "uploader.h"
#include "worker_context.h"

namespace fusetune::worker_internal {

class DeviceRunner {
 public:
  // `ctx` is shared so that a runner abandoned in a hung kernel keeps it alive.
  DeviceRunner(std::shared_ptr<WorkerContext> ctx, int slot, int device_index, std::unique_ptr<Backend> backend,
               std::unique_ptr<TrialSpool> spool, int thread_cap);
  ~DeviceRunner();

  const std::string& worker_id() const { return worker_id_; }
  const std::string& spool_path() const { return spool_->path(); }

  void Start();
  // Waits up to `hung_grace` for the main loop to end, then ends the other threads. A device
  // hung in a kernel cannot be joined: its main thread is detached (the caller must then
  // leak the runner, which that thread may still touch) and Join returns false.
  bool Join(absl::Duration hung_grace);
  // The worker stops (called by the stop relay).
  void OnStop() { job_.Stop(); }

  bool exited() const { return job_.phase() == JobPhase::kExited; }
  // Stuck in a measurement the watchdog gave up on.
  bool hung() const { return job_.hung(); }
  bool ever_registered() const { return job_.registered(); }

 private:
  class SpoolSink;
  // What an audit step tells the job loop.
  enum class AuditStep { kNext, kStopped, kJobOver };
  struct AuditTally {
    std::vector<std::string> failures;
    int audited = 0;
  };

  void Log(const std::string& msg) const { ctx_->Log("[" + worker_id_ + "] " + msg); }
  // Reports a refused JobState transition (a bug, never expected).
  void Check(const absl::Status& transition) const;

  // ---- device_runner.cc: threads, registration, leasing, job RPCs
  void MainLoop();
  void LeaseAndRunJobs();
  bool Register();
  absl::Status Lease(v1::LeaseJobResponse& lease);
  void DrainSpoolFirst();
  bool RecreateBackend();
  void MarkDeviceFailed();
  void HeartbeatLoop();
  void SendHeartbeat(int64_t job_id, absl::Duration heartbeat);
  void GiveUpHungJob(const JobState::Tick& tick);
  // kHolding -> kCompleting, then CompleteJob (retried while the service is away).
  void Complete(int64_t job_id, bool success, const std::string& error);
  void Release(int64_t job_id, const std::string& why);
  // Waits (bounded by shutdown_upload_timeout) for the run's uploads, then releases the job.
  void ReleaseAfterUpload(int64_t job_id, int64_t run_id, const std::string& why);
  // A failed measurement: counts it, releases the job and rests the device.
  void FailDevice(int64_t job_id, int64_t run_id, const std::string& why);
  // Waits until the spool holds no pending trial of `run_id`. False on timeout, stop (for
  // an infinite timeout) or lease loss.
  bool WaitUploaded(int64_t run_id, absl::Duration timeout);
  // Every trial of the run on the server, as completion (and an audit report) needs. False
  // when the job is over instead: dropped after a lost lease, or released at shutdown.
  bool UploadedOrJobOver(int64_t job_id, int64_t run_id);

  // ---- device_jobs.cc: running a job (true: completed, false: released or lost)
  bool RunJob(const v1::LeaseJobResponse& lease);
  bool RunHeldJob(const v1::LeaseJobResponse& lease);
  bool RunTuneJob(const v1::LeaseJobResponse& lease, const std::vector<AttentionProblem>& problems,
                  const SweepOptions& options);
  bool FinishTuneJob(int64_t job_id, int64_t run_id, absl::StatusOr<SweepResult> result, size_t resumed,
                     absl::Duration took);
  bool RunAuditJob(const v1::LeaseJobResponse& lease, const std::vector<AttentionProblem>& problems,
                   const SweepOptions& sweep);
  AuditStep AuditProblem(const v1::LeaseJobResponse& lease, int index, const AttentionProblem& problem,
                         const AuditOptions& audit, AuditTally& tally);
  AuditStep ReportAuditOf(const v1::LeaseJobResponse& lease, const std::string& recorded_key,
                          AuditSummary summary, AuditTally& tally);
  bool FinishAuditJob(const v1::LeaseJobResponse& lease, size_t problems, bool stopped, const AuditTally& tally);
  absl::StatusOr<SweepOptions> SweepOptionsFor(const v1::LeaseJobResponse& lease) const;
  absl::StatusOr<std::vector<Trial>> KnownTrials(int64_t run_id);
  bool AlreadyAudited(int64_t run_id, const std::string& device_class, const std::string& problem_key);
  absl::Status ReportAudit(int64_t job_id, const AuditSummary& summary);

  const std::shared_ptr<WorkerContext> ctx_;
  const int slot_;
  const int device_index_;
  const std::string worker_id_;
  std::unique_ptr<Backend> backend_;  // main thread only
  std::unique_ptr<TrialSpool> spool_;
  const int thread_cap_;  // > 0: CPU threads this slot may use
  DeviceInfo info_;
  std::string device_class_;

  JobState job_;
  // The token of the lease held now (Job.lease_token; 0 when none): every job RPC carries it,
  // so a lease this device lost to another holder cannot be renewed or completed by it.
  std::atomic<int64_t> lease_token_{0};
  std::unique_ptr<Uploader> uploader_;
  // A device that failed gets a fresh backend after resting (main thread only).
  bool needs_new_backend_ = false;
  absl::Time device_failed_until_ = absl::InfinitePast();

  std::thread main_, heartbeat_;
};

}  // namespace fusetune::worker_internal

#endif  // FUSETUNE_WORKER_DEVICE_RUNNER_H_
