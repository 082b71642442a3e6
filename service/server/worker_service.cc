#include "worker_service.h"

#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "fusetune/base/strings.h"
#include "fusetune/wire/convert.h"
#include "fusetune/wire/records_convert.h"

namespace fusetune {
namespace {

constexpr int kMaxTrialsPerStream = 4096;
constexpr int kMaxLeaseWaitMs = 30000;

class SlotGuard {
 public:
  explicit SlotGuard(Slots* slots) : slots_(slots), held_(slots->Acquire()) {}
  ~SlotGuard() {
    if (held_) slots_->Release();
  }
  bool held() const { return held_; }

 private:
  Slots* slots_;
  bool held_;
};

absl::Status CheckJobId(int64_t job_id) {
  return job_id > 0 ? absl::OkStatus() : absl::InvalidArgumentError("job_id: must be > 0");
}

}  // namespace

// One LeaseJob call. The callback API is used for it because, unlike the sync API, it tells
// the server how a call ended: OnCancel when the caller is gone (cancelled, past its deadline,
// disconnected) and, in OnDone, whether the reply was delivered. A long-poll waits up to 30 s,
// which must not block gRPC's callback threads, so each call runs on a thread of its own
// (at most max_concurrent_long_polls at once; LeaseJob refuses the others, and
// unauthenticated calls, without a thread).
//
// Lifetime: created by LeaseJob, deleted by OnDone (after Finish; gRPC guarantees OnDone is
// the last callback). Thread-safety: Run on its thread; OnCancel/OnDone on gRPC's.
class WorkerService::LeaseCall final : public grpc::ServerUnaryReactor, public LongPollCaller {
 public:
  LeaseCall(WorkerService* service, grpc::CallbackServerContext* ctx, const v1::LeaseJobRequest* req,
            v1::LeaseJobResponse* resp)
      : service_(service), ctx_(ctx), req_(req), resp_(resp) {}

  grpc::CallbackServerContext* context() { return ctx_; }

  // Runs the long-poll (of an authenticated call holding a long-poll slot) and finishes the
  // call; `this` may be deleted once it returns.
  void Run() {
    grpc::Status status =
        service_->edge_->Handle("LeaseJob", ctx_, [&] { return service_->Lease(*this, *req_, resp_); });
    if (!status.ok()) resp_->Clear();
    service_->long_polls_.Release();  // before the reply: the caller's next poll may come at once
    Finish(status);
  }

  bool gone() const override {
    return cancelled_.load() || ctx_->IsCancelled() || std::chrono::system_clock::now() >= ctx_->deadline();
  }
  // Why the caller is gone (for the call's status; it is rarely read by anyone).
  absl::Status GoneStatus() const override {
    if (cancelled_.load() || ctx_->IsCancelled()) return absl::CancelledError("call cancelled");
    return absl::DeadlineExceededError("the caller's deadline passed");
  }
  std::chrono::system_clock::time_point deadline() const override { return ctx_->deadline(); }
  // Set once a job is leased for this reply; OnDone gives it back if the reply is lost.
  void set_leased_job(int64_t job_id, int64_t lease_token) {
    leased_job_id_ = job_id;
    leased_token_ = lease_token;
  }

  void OnCancel() override {
    cancelled_.store(true);
    service_->core_->WakeLongPolls();
  }
  void OnDone() override {
    // A call that ends cancelled did not deliver its reply (the client went away or its
    // deadline passed before the reply was sent): its job goes back to the queue now rather
    // than after the lease. (A reply lost after it left this server is not seen here; the
    // lease expiry covers that.)
    if (leased_job_id_ != 0 && ctx_->IsCancelled()) {
      service_->core_->ReturnUndeliveredLease(leased_job_id_, req_->worker_id(), leased_token_);
    }
    delete this;
  }

 private:
  WorkerService* const service_;
  grpc::CallbackServerContext* const ctx_;
  const v1::LeaseJobRequest* const req_;
  v1::LeaseJobResponse* const resp_;
  std::atomic<bool> cancelled_{false};
  int64_t leased_job_id_ = 0;
  int64_t leased_token_ = 0;
};

WorkerService::WorkerService(ServerCore* core, const RpcEdge* edge, ServiceMetrics* metrics)
    : core_(core),
      edge_(edge),
      metrics_(metrics),
      long_polls_(core->options().max_concurrent_long_polls),
      streams_(core->options().max_concurrent_streams) {}

grpc::Status WorkerService::RegisterWorker(grpc::ServerContext* ctx, const v1::RegisterWorkerRequest* req,
                                           v1::RegisterWorkerResponse* resp) {
  return edge_->Handle("RegisterWorker", ctx, [&]() -> absl::Status {
    if (auto s = edge_->Authenticate(ctx); !s.ok()) return s;
    auto worker = WorkerFromRegisterRequest(*req);
    if (!worker.ok()) return worker.status();
    if (auto s = core_->RegisterWorker(std::move(*worker)); !s.ok()) return s;
    resp->set_lease_ms(core_->options().lease_ms);
    resp->set_heartbeat_ms(core_->options().heartbeat_ms);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WorkerService::LeaseJob(grpc::CallbackServerContext* ctx, const v1::LeaseJobRequest* req,
                                                  v1::LeaseJobResponse* resp) {
  auto* call = new LeaseCall(this, ctx, req, resp);
  // Refusals that need no waiting are answered here, so that only authenticated calls within
  // the long-poll cap get a thread.
  absl::Status refused = edge_->Authenticate(ctx);
  if (refused.ok() && !long_polls_.Acquire()) {
    refused = absl::ResourceExhaustedError(Cat("too many concurrent LeaseJob long-polls (",
                                               core_->options().max_concurrent_long_polls, "); retry later"));
  }
  if (!refused.ok()) {
    grpc::Status status = ToRpcStatus(ctx, refused);
    edge_->Observe("LeaseJob", status.error_code(), 0.0);
    call->Finish(status);
    return call;
  }
  if (!StartPollThread(call)) {
    long_polls_.Release();
    call->Finish(ToRpcStatus(ctx, absl::ResourceExhaustedError("cannot start a long-poll thread; retry later")));
  }
  return call;
}

bool WorkerService::StartPollThread(LeaseCall* call) {
  {
    std::lock_guard<std::mutex> lock(poll_threads_mu_);
    ++poll_threads_;
  }
  try {
    std::thread([this, call] {
      call->Run();
      // Notified under the lock: WaitForLongPolls returns (and the service may be destroyed)
      // only after it reacquires the lock, so never while this thread still touches the cv.
      std::lock_guard<std::mutex> lock(poll_threads_mu_);
      --poll_threads_;
      poll_threads_cv_.notify_all();
    }).detach();
    return true;
  } catch (const std::system_error&) {
    {
      std::lock_guard<std::mutex> lock(poll_threads_mu_);
      --poll_threads_;
    }
    poll_threads_cv_.notify_all();
    return false;
  }
}

void WorkerService::WaitForLongPolls() {
  // Every long-poll saw the shutdown and is finishing; none starts after the server stopped.
  std::unique_lock<std::mutex> lock(poll_threads_mu_);
  poll_threads_cv_.wait(lock, [&] { return poll_threads_ == 0; });
}

absl::Status WorkerService::Lease(LeaseCall& call, const v1::LeaseJobRequest& req, v1::LeaseJobResponse* resp) {
  if (auto s = ValidateId(req.worker_id(), "worker_id"); !s.ok()) return s;
  if (req.wait_ms() < 0 || req.wait_ms() > kMaxLeaseWaitMs) {
    return absl::InvalidArgumentError(Cat("wait_ms: must be in [0, ", kMaxLeaseWaitMs, "]"));
  }
  auto lease = core_->LeaseJob(req.worker_id(), req.device_class(), req.wait_ms(), call);
  if (!lease.ok()) return lease.status();
  if (!lease->has_value()) {
    resp->set_leased(false);
    return absl::OkStatus();
  }
  const int64_t job_id = (*lease)->job.job_id;
  const int64_t lease_token = (*lease)->job.lease_token;
  if (call.gone()) {  // went away while the job was being prepared
    core_->ReturnUndeliveredLease(job_id, req.worker_id(), lease_token);
    return call.GoneStatus();
  }
  JobLeaseToProto(**lease, resp);
  call.set_leased_job(job_id, lease_token);
  return absl::OkStatus();
}

grpc::Status WorkerService::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                      v1::HeartbeatResponse* resp) {
  return edge_->Handle("Heartbeat", ctx, [&]() -> absl::Status {
    if (auto s = edge_->Authenticate(ctx); !s.ok()) return s;
    if (auto s = ValidateId(req->worker_id(), "worker_id"); !s.ok()) return s;
    if (req->job_id() < 0) return absl::InvalidArgumentError("job_id: must be >= 0 (0 = idle)");
    if (req->lease_token() < 0) return absl::InvalidArgumentError("lease_token: must be >= 0 (0 = none)");
    auto valid = core_->Heartbeat(req->worker_id(), req->job_id(), req->lease_token());
    if (!valid.ok()) return valid.status();
    resp->set_lease_valid(*valid);
    return absl::OkStatus();
  });
}

grpc::Status WorkerService::ReportTrials(grpc::ServerContext* ctx, grpc::ServerReader<v1::Trial>* reader,
                                         v1::ReportTrialsResponse* resp) {
  return edge_->Handle("ReportTrials", ctx, [&]() -> absl::Status {
    if (auto s = edge_->Authenticate(ctx); !s.ok()) return s;
    return Upload(ctx, reader, resp);
  });
}

absl::Status WorkerService::Upload(grpc::ServerContext* ctx, grpc::ServerReader<v1::Trial>* reader,
                                   v1::ReportTrialsResponse* resp) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(kWorkerIdMetadata);
  if (it == md.end()) {
    return absl::InvalidArgumentError(Cat("missing '", kWorkerIdMetadata, "' metadata naming the uploading worker"));
  }
  const std::string worker_id(it->second.data(), it->second.size());
  if (auto s = ValidateId(worker_id, kWorkerIdMetadata); !s.ok()) return s;
  if (auto s = core_->CheckRegistered(worker_id); !s.ok()) return s;
  SlotGuard slot(&streams_);
  if (!slot.held()) {
    return absl::ResourceExhaustedError(Cat("too many concurrent ReportTrials streams (",
                                            core_->options().max_concurrent_streams, "); retry later"));
  }
  int64_t lease_token = kNoLeaseToken;
  if (auto token = md.find(kLeaseTokenMetadata); token != md.end()) {
    const std::string text(token->second.data(), token->second.size());
    if (!absl::SimpleAtoi(text, &lease_token) || lease_token < 0) {
      return absl::InvalidArgumentError(Cat("'", kLeaseTokenMetadata, "' metadata must be a lease token (>= 0), got '",
                                            text, "'"));
    }
  }
  ServerCore::TrialUpload upload = core_->BeginTrialUpload(worker_id, lease_token);
  int64_t received = 0;
  absl::Status result;
  v1::Trial proto;
  while (result.ok() && reader->Read(&proto)) {
    if (received >= kMaxTrialsPerStream) {
      result = absl::ResourceExhaustedError(
          Cat("more than ", kMaxTrialsPerStream, " trials in one stream; split the upload"));
      break;
    }
    ++received;
    auto trial = TrialFromProto(proto);
    result = trial.ok() ? upload.Add(std::move(*trial), received)
                        : absl::InvalidArgumentError(Cat("trial #", received, ": ", trial.status().message()));
  }
  if (result.ok()) result = upload.Flush();
  metrics_->AddTrials(received, upload.inserted());
  resp->set_received(static_cast<int32_t>(received));
  resp->set_inserted(static_cast<int32_t>(upload.inserted()));
  return result;
}

grpc::Status WorkerService::CompleteJob(grpc::ServerContext* ctx, const v1::CompleteJobRequest* req,
                                        v1::CompleteJobResponse*) {
  return edge_->Handle("CompleteJob", ctx, [&]() -> absl::Status {
    if (auto s = edge_->Authenticate(ctx); !s.ok()) return s;
    if (auto s = ValidateId(req->worker_id(), "worker_id"); !s.ok()) return s;
    if (auto s = CheckJobId(req->job_id()); !s.ok()) return s;
    if (auto s = ValidateText(req->error(), kMaxTextLength, "error"); !s.ok()) return s;
    if (req->lease_token() < 0) return absl::InvalidArgumentError("lease_token: must be >= 0 (0 = none)");
    return core_->CompleteJob(req->worker_id(), req->job_id(), req->lease_token(), req->success(), req->error());
  });
}

grpc::Status WorkerService::ReportAudit(grpc::ServerContext* ctx, const v1::ReportAuditRequest* req,
                                        v1::ReportAuditResponse* resp) {
  return edge_->Handle("ReportAudit", ctx, [&]() -> absl::Status {
    if (auto s = edge_->Authenticate(ctx); !s.ok()) return s;
    if (auto s = ValidateId(req->worker_id(), "worker_id"); !s.ok()) return s;
    if (auto s = CheckJobId(req->job_id()); !s.ok()) return s;
    if (!req->has_audit()) return absl::InvalidArgumentError("audit: required");
    auto audit = AuditSummaryFromProto(req->audit());
    if (!audit.ok()) return audit.status();
    if (req->lease_token() < 0) return absl::InvalidArgumentError("lease_token: must be >= 0 (0 = none)");
    auto id = core_->ReportAudit(req->worker_id(), req->job_id(), req->lease_token(), std::move(*audit));
    if (!id.ok()) return id.status();
    resp->set_audit_id(*id);
    return absl::OkStatus();
  });
}

grpc::Status WorkerService::ReleaseJob(grpc::ServerContext* ctx, const v1::ReleaseJobRequest* req,
                                       v1::ReleaseJobResponse*) {
  return edge_->Handle("ReleaseJob", ctx, [&]() -> absl::Status {
    if (auto s = edge_->Authenticate(ctx); !s.ok()) return s;
    if (auto s = ValidateId(req->worker_id(), "worker_id"); !s.ok()) return s;
    if (auto s = CheckJobId(req->job_id()); !s.ok()) return s;
    if (req->lease_token() < 0) return absl::InvalidArgumentError("lease_token: must be >= 0 (0 = none)");
    return core_->ReleaseJob(req->worker_id(), req->job_id(), req->lease_token());
  });
}

}  // namespace fusetune
