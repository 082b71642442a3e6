#include "device_runner.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "fusetune/base/backoff.h"
#include "fusetune/base/strings.h"
#include "fusetune/wire/records_convert.h"
#include "fusetune/wire/status.h"

namespace fusetune::worker_internal {
namespace {

constexpr int64_t kDefaultLeaseMs = 30000;

bool Retryable(const grpc::Status& st) {
  return st.error_code() == grpc::StatusCode::UNAVAILABLE || st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
         st.error_code() == grpc::StatusCode::CANCELLED;
}

}  // namespace

DeviceRunner::DeviceRunner(std::shared_ptr<WorkerContext> ctx, int slot, int device_index,
                           std::unique_ptr<Backend> backend, std::unique_ptr<TrialSpool> spool, int thread_cap)
    : ctx_(std::move(ctx)),
      slot_(slot),
      device_index_(device_index),
      worker_id_(absl::StrCat(ctx_->options().worker_id, "-d", slot)),
      backend_(std::move(backend)),
      spool_(std::move(spool)),
      thread_cap_(thread_cap) {
  info_ = backend_->Describe();
  info_.device_index = slot;  // CPU slots share index 0; report the slot we drive
  device_class_ = info_.DeviceClass();
  uploader_ = std::make_unique<Uploader>(*ctx_, worker_id_, *spool_,
                                         Uploader::Callbacks{
                                             .register_again = [this] { Register(); },
                                             .on_progress = [this] { job_.NotifyWaiters(); },
                                             .log = [this](const std::string& line) { Log(line); },
                                         });
}

DeviceRunner::~DeviceRunner() = default;

void DeviceRunner::Check(const absl::Status& transition) const {
  if (!transition.ok()) Log(absl::StrCat("internal error: ", transition.message()));
}

void DeviceRunner::Start() {
  uploader_->Start();
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  main_ = std::thread([this] { MainLoop(); });
}

bool DeviceRunner::Join(absl::Duration hung_grace) {
  const bool clean = job_.WaitExited(absl::Now() + hung_grace);
  if (clean) {
    main_.join();
  } else {
    main_.detach();
  }
  job_.StopThreads();
  uploader_->Stop();
  heartbeat_.join();
  return clean;
}

// ---------------------------------------------------------------------------- main thread

void DeviceRunner::MainLoop() {
  if (Register()) {
    DrainSpoolFirst();
    LeaseAndRunJobs();
  }
  Check(job_.Exit());
  ctx_->NotifyEvent();
}

void DeviceRunner::LeaseAndRunJobs() {
  Backoff backoff(ctx_->options().backoff, std::hash<std::string>{}(worker_id_) + 1);
  while (!ctx_->ending()) {
    if (device_failed_until_ > absl::Now()) {
      ctx_->SleepUnlessEnding(device_failed_until_ - absl::Now());
      continue;
    }
    if (needs_new_backend_ && !RecreateBackend()) continue;
    // Reserve a job slot so that devices together never exceed max_jobs.
    if (!ctx_->ReserveJob()) continue;
    Check(job_.BeginLeasing(/*reserved=*/ctx_->options().max_jobs > 0));
    v1::LeaseJobResponse lease;
    absl::Status st = Lease(lease);
    if (!st.ok() || !lease.leased()) {
      absl::StatusOr<bool> reserved = job_.EndLeasing();
      if (reserved.value_or(false)) ctx_->ReturnJob();
      if (!st.ok() && !ctx_->ending()) {
        if (ErrorReason(st) == kReasonWorkerNotRegistered) Register();  // the server forgot us
        const int64_t delay = backoff.NextDelayMs();
        Log(absl::StrCat("lease failed: ", st.ToString(), "; retry in ", delay, " ms"));
        ctx_->SleepUnlessStopping(absl::Milliseconds(delay));
      }
      continue;
    }
    backoff.Reset();
    const bool completed = RunJob(lease);
    absl::StatusOr<bool> reserved = job_.EndJob(completed);
    Check(reserved.status());
    if (reserved.value_or(false)) ctx_->ReturnJob();
  }
}

bool DeviceRunner::Register() {
  Backoff backoff(ctx_->options().backoff, std::hash<std::string>{}(worker_id_));
  while (!ctx_->stopping()) {
    v1::RegisterWorkerRequest req;
    req.set_worker_id(worker_id_);
    req.set_host(ctx_->options().host);
    DeviceInfoToProto(info_, req.mutable_device());
    v1::RegisterWorkerResponse resp;
    grpc::ClientContext ctx;
    ctx_->Prepare(ctx, absl::Seconds(10), /*cancel_on_stop=*/true);
    grpc::Status st = ctx_->worker_stub().RegisterWorker(&ctx, req, &resp);
    ctx_->Done(ctx);
    if (st.ok()) {
      const int64_t lease_ms = resp.lease_ms() > 0 ? resp.lease_ms() : kDefaultLeaseMs;
      const int64_t heartbeat_ms = resp.heartbeat_ms() > 0 ? resp.heartbeat_ms() : std::max<int64_t>(100, lease_ms / 3);
      job_.SetRegistered(absl::Milliseconds(heartbeat_ms));
      uploader_->OnRegistered();
      Log(absl::StrCat("registered ", device_class_, " (lease ", lease_ms, " ms, heartbeat ", heartbeat_ms, " ms)"));
      return true;
    }
    const int64_t delay = backoff.NextDelayMs();
    Log(absl::StrCat("register failed: ", st.error_message(), " (code ", st.error_code(), "); retry in ", delay,
                     " ms"));
    ctx_->SleepUnlessStopping(absl::Milliseconds(delay));
  }
  return false;
}

absl::Status DeviceRunner::Lease(v1::LeaseJobResponse& lease) {
  v1::LeaseJobRequest req;
  req.set_worker_id(worker_id_);
  req.set_device_class(device_class_);
  req.set_wait_ms(ctx_->options().lease_wait_ms);
  grpc::ClientContext ctx;
  ctx_->Prepare(ctx, absl::Milliseconds(ctx_->options().lease_wait_ms) + absl::Seconds(10),
                /*cancel_on_stop=*/true);
  grpc::Status st = ctx_->worker_stub().LeaseJob(&ctx, req, &lease);
  ctx_->Done(ctx);
  return FromGrpcCall(st, ctx);
}

// Before leasing anything, upload what an earlier life of this worker left in the spool.
void DeviceRunner::DrainSpoolFirst() {
  const size_t pending = spool_->pending_count();
  if (pending == 0) return;
  Log(absl::StrCat("spool holds ", pending, " trials from before; uploading them first"));
  uploader_->Wake();
  job_.WaitUploaded([this] { return uploader_->UploadablePending() == 0; }, absl::InfiniteFuture(),
                    /*give_up_on_stop=*/true);
  Log(absl::StrCat("spool drained (", spool_->pending_count(), " parked for runs not held)"));
}

bool DeviceRunner::RecreateBackend() {
  absl::StatusOr<std::unique_ptr<Backend>> b = ctx_->options().backend_factory(device_index_);
  if (!b.ok()) {
    Log(absl::StrCat("device still unavailable: ", b.status().ToString()));
    device_failed_until_ = absl::Now() + ctx_->options().device_retry;
    return false;
  }
  backend_ = *std::move(b);
  needs_new_backend_ = false;
  Log("device back in service");
  return true;
}

void DeviceRunner::MarkDeviceFailed() {
  needs_new_backend_ = true;
  device_failed_until_ = absl::Now() + ctx_->options().device_retry;
}

// ---------------------------------------------------------------------------- heartbeat

void DeviceRunner::HeartbeatLoop() {
  absl::Time next_beat = absl::InfinitePast();
  while (true) {
    const JobState::Tick tick = job_.WaitForTick(next_beat);
    switch (tick.kind) {
      case JobState::Tick::Kind::kShutdown:
        return;
      case JobState::Tick::Kind::kHung:
        GiveUpHungJob(tick);
        break;
      case JobState::Tick::Kind::kBeat:
        next_beat = absl::Now() + tick.heartbeat;
        SendHeartbeat(tick.job_id, tick.heartbeat);
        break;
    }
  }
}

// The watchdog: one measurement running for longer than its limit is a hung device. The
// job goes back to the queue now; the main thread finds out when (if) the kernel returns.
void DeviceRunner::GiveUpHungJob(const JobState::Tick& tick) {
  ctx_->device_failures.fetch_add(1);
  Log(Cat("watchdog: no ", tick.measuring, " finished in ", absl::FormatDuration(tick.watchdog_limit),
                   "; device considered hung, releasing job ", tick.job_id));
  Release(tick.job_id, "device hung");
  if (tick.return_reservation) ctx_->ReturnJob();
  ctx_->NotifyEvent();  // the Worker, when ending, waits for devices that are not hung
}

void DeviceRunner::SendHeartbeat(int64_t job_id, absl::Duration heartbeat) {
  v1::HeartbeatRequest req;
  req.set_worker_id(worker_id_);
  req.set_job_id(job_id);
  req.set_lease_token(lease_token_.load());
  v1::HeartbeatResponse resp;
  grpc::ClientContext ctx;
  ctx_->Prepare(ctx, std::max(absl::Milliseconds(500), heartbeat));
  grpc::Status st = ctx_->worker_stub().Heartbeat(&ctx, req, &resp);
  ctx_->Done(ctx);
  if (ErrorReason(FromGrpcCall(st, ctx)) == kReasonWorkerNotRegistered) {
    Register();  // the server does not know us (e.g. a fresh database)
    return;
  }
  if (!st.ok()) return;  // the service is away: keep working, the spool holds results
  if (job_id != 0 && !resp.lease_valid() && job_.LeaseLost(job_id)) {
    Log(absl::StrCat("heartbeat: lease of job ", job_id, " no longer valid; cancelling its sweep"));
  }
}

// ---------------------------------------------------------------------------- job RPCs

void DeviceRunner::Complete(int64_t job_id, bool success, const std::string& error) {
  Check(job_.BeginCompleting());
  Backoff backoff(ctx_->options().backoff);
  while (true) {
    v1::CompleteJobRequest req;
    req.set_worker_id(worker_id_);
    req.set_job_id(job_id);
    req.set_lease_token(lease_token_.load());
    req.set_success(success);
    req.set_error(error.substr(0, kMaxTextLength));
    v1::CompleteJobResponse resp;
    grpc::ClientContext ctx;
    ctx_->Prepare(ctx, absl::Seconds(30));
    grpc::Status st = ctx_->worker_stub().CompleteJob(&ctx, req, &resp);
    ctx_->Done(ctx);
    if (st.ok()) {
      Log(absl::StrCat("job ", job_id, success ? " completed" : absl::StrCat(" failed: ", error)));
      ctx_->CountFinishedJob(success);
      return;
    }
    // Only transport trouble is worth retrying; the server refusing (the lease lapsed and
    // the job went to another worker) is final. A retry after a lost reply is answered OK
    // (completion is idempotent for the same worker).
    if (!Retryable(st)) {
      ctx_->jobs_lost.fetch_add(1);
      Log(absl::StrCat("job ", job_id, ": completion refused: ", st.error_message()));
      return;
    }
    if (ctx_->stopping() && backoff.attempt() > 5) {
      Log(absl::StrCat("job ", job_id, ": could not complete before shutdown; the lease will lapse"));
      return;
    }
    absl::SleepFor(absl::Milliseconds(backoff.NextDelayMs()));  // not cut short by a stop: finishing matters
  }
}

void DeviceRunner::Release(int64_t job_id, const std::string& why) {
  v1::ReleaseJobRequest req;
  req.set_worker_id(worker_id_);
  req.set_job_id(job_id);
  req.set_lease_token(lease_token_.load());
  v1::ReleaseJobResponse resp;
  grpc::ClientContext ctx;
  ctx_->Prepare(ctx, absl::Seconds(5));
  grpc::Status st = ctx_->worker_stub().ReleaseJob(&ctx, req, &resp);
  ctx_->Done(ctx);
  ctx_->jobs_released.fetch_add(1);
  if (st.ok()) {
    Log(absl::StrCat("job ", job_id, " released (", why, ")"));
  } else {
    Log(absl::StrCat("job ", job_id, " not released (", st.error_message(), "); its lease will lapse (", why, ")"));
  }
}

void DeviceRunner::ReleaseAfterUpload(int64_t job_id, int64_t run_id, const std::string& why) {
  WaitUploaded(run_id, ctx_->options().shutdown_upload_timeout);
  Release(job_id, why);
}

void DeviceRunner::FailDevice(int64_t job_id, int64_t run_id, const std::string& why) {
  ctx_->device_failures.fetch_add(1);
  if (!why.empty()) Log(absl::StrCat("job ", job_id, ": ", why, "; releasing and resting the device"));
  ReleaseAfterUpload(job_id, run_id, "device failure");
  MarkDeviceFailed();
}

bool DeviceRunner::WaitUploaded(int64_t run_id, absl::Duration timeout) {
  uploader_->Wake();
  const bool forever = timeout == absl::InfiniteDuration();
  return job_.WaitUploaded([&] { return uploader_->PendingForRun(run_id) == 0; },
                           forever ? absl::InfiniteFuture() : absl::Now() + timeout,
                           /*give_up_on_stop=*/forever);
}

bool DeviceRunner::UploadedOrJobOver(int64_t job_id, int64_t run_id) {
  if (WaitUploaded(run_id, absl::InfiniteDuration())) return true;
  if (job_.cause() == StopCause::kLeaseLost) {
    ctx_->jobs_lost.fetch_add(1);
    Log(absl::StrCat("job ", job_id, ": lease lost while uploading"));
    return false;
  }
  // Stopping with the measurements done: go on if the uploads make it in time.
  if (WaitUploaded(run_id, ctx_->options().shutdown_upload_timeout)) return true;
  Release(job_id, "worker shutting down before its trials were uploaded");
  return false;
}

}  // namespace fusetune::worker_internal
