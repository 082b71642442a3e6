// RpcEdge: what every RPC of the two services does at the gRPC boundary: authenticate the
// caller (bearer token, compared in constant time), run the handler (which returns
// absl::Status), convert its status to gRPC once (ToRpcStatus, which also sends a status's
// error reason as trailing metadata), record the call's metrics, and keep any exception
// from escaping to gRPC.
//
// Thread-safety: immutable after construction; safe to use from every RPC thread.
#ifndef FUSETUNE_SERVICE_RPC_EDGE_H_
#define FUSETUNE_SERVICE_RPC_EDGE_H_

#include <chrono>
#include <exception>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "fusetune/base/strings.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"
#include "metrics.h"

namespace fusetune {

// The one absl -> gRPC status conversion of the server: ToGrpcStatus, plus the status's
// error reason (if any) as the trailing metadata entry kErrorReasonMetadata of `ctx`.
grpc::Status ToRpcStatus(grpc::ServerContextBase* ctx, const absl::Status& status);

class RpcEdge {
 public:
  RpcEdge(std::string token, bool open_reads, ServiceMetrics* metrics)
      : token_(std::move(token)), open_reads_(open_reads), metrics_(metrics) {}

  // OK when the call carries "authorization: Bearer <token>"; Unauthenticated otherwise.
  absl::Status Authenticate(const grpc::ServerContextBase* ctx) const;
  // Authenticate, unless reads are open.
  absl::Status AuthenticateRead(const grpc::ServerContextBase* ctx) const {
    return open_reads_ ? absl::OkStatus() : Authenticate(ctx);
  }

  // Runs `body` (returning absl::Status) for RPC `method`: the status goes out through
  // ToRpcStatus, is counted in the RPC metrics with the call's duration, and an exception
  // becomes INTERNAL.
  template <typename F>
  grpc::Status Handle(const char* method, grpc::ServerContextBase* ctx, F&& body) const {
    const auto start = std::chrono::steady_clock::now();
    absl::Status status;
    try {
      status = body();
    } catch (const std::exception& e) {
      status = absl::InternalError(Cat("internal error: ", e.what()));
    } catch (...) {
      status = absl::InternalError("internal error");
    }
    grpc::Status out = ToRpcStatus(ctx, status);
    Observe(method, out.error_code(), std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return out;
  }

  void Observe(const char* method, grpc::StatusCode code, double seconds) const {
    metrics_->ObserveRpc(method, code, seconds);
  }

 private:
  const std::string token_;
  const bool open_reads_;
  ServiceMetrics* const metrics_;
};

}  // namespace fusetune

#endif  // FUSETUNE_SERVICE_RPC_EDGE_H_
