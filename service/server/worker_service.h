// WorkerService (fusetune.proto) over a ServerCore: registration, the LeaseJob long-poll,
// heartbeats, trial uploads, audits, completion and release. Each RPC authenticates through
// the RpcEdge, validates and maps its request with the wire library, calls the core and
// maps the answer back.
//
// LeaseJob alone is served on gRPC's callback API (see LeaseCall in worker_service.cc): it
// tells the server how a call ended, so that a job leased for a caller that went away goes
// straight back to the queue. Each long-poll runs on a thread of its own, at most
// max_concurrent_long_polls at once; ReportTrials streams are capped at
// max_concurrent_streams (RESOURCE_EXHAUSTED beyond either).
//
// Thread-safety: gRPC calls it from many threads. WaitForLongPolls is called once, after the
// gRPC server has shut down.
#ifndef FUSETUNE_SERVICE_WORKER_SERVICE_H_
#define FUSETUNE_SERVICE_WORKER_SERVICE_H_

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "fusetune/proto/fusetune.grpc.pb.h"
#include "rpc_edge.h"
#include "server_core.h"

namespace fusetune {

// Counts a scarce resource (long-polls, streams); Acquire fails beyond the cap.
class Slots {
 public:
  explicit Slots(int cap) : cap_(cap) {}
  bool Acquire() {
    if (used_.fetch_add(1) >= cap_) {
      used_.fetch_sub(1);
      return false;
    }
    return true;
  }
  void Release() { used_.fetch_sub(1); }

 private:
  const int cap_;
  std::atomic<int> used_{0};
};

class WorkerService final : public v1::WorkerService::WithCallbackMethod_LeaseJob<v1::WorkerService::Service> {
 public:
  // `core`, `edge` and `metrics` must outlive the service.
  WorkerService(ServerCore* core, const RpcEdge* edge, ServiceMetrics* metrics);

  grpc::Status RegisterWorker(grpc::ServerContext* ctx, const v1::RegisterWorkerRequest* req,
                              v1::RegisterWorkerResponse* resp) override;
  grpc::ServerUnaryReactor* LeaseJob(grpc::CallbackServerContext* ctx, const v1::LeaseJobRequest* req,
                                     v1::LeaseJobResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;
  grpc::Status ReportTrials(grpc::ServerContext* ctx, grpc::ServerReader<v1::Trial>* reader,
                            v1::ReportTrialsResponse* resp) override;
  grpc::Status CompleteJob(grpc::ServerContext* ctx, const v1::CompleteJobRequest* req,
                           v1::CompleteJobResponse* resp) override;
  grpc::Status ReportAudit(grpc::ServerContext* ctx, const v1::ReportAuditRequest* req,
                           v1::ReportAuditResponse* resp) override;
  grpc::Status ReleaseJob(grpc::ServerContext* ctx, const v1::ReleaseJobRequest* req,
                          v1::ReleaseJobResponse* resp) override;

  // Returns once every long-poll thread has finished. Call after the gRPC server shut down
  // (and the core's BeginShutdown), so that none starts afterwards.
  void WaitForLongPolls();

 private:
  class LeaseCall;

  // The long-poll of one LeaseJob call.
  absl::Status Lease(LeaseCall& call, const v1::LeaseJobRequest& req, v1::LeaseJobResponse* resp);
  absl::Status Upload(grpc::ServerContext* ctx, grpc::ServerReader<v1::Trial>* reader, v1::ReportTrialsResponse* resp);
  // Runs `call` on a thread of its own; false when no thread could be started.
  bool StartPollThread(LeaseCall* call);

  ServerCore* const core_;
  const RpcEdge* const edge_;
  ServiceMetrics* const metrics_;
  Slots long_polls_;
  Slots streams_;

  // LeaseJob long-poll threads still running; WaitForLongPolls waits for them.
  std::mutex poll_threads_mu_;
  std::condition_variable poll_threads_cv_;
  int poll_threads_ = 0;
};

}  // namespace fusetune

#endif  // FUSETUNE_SERVICE_WORKER_SERVICE_H_
