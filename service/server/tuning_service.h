// TuningService (fusetune.proto) over a ServerCore: best-config lookups, job submission and
// the read-only listings. Each RPC authenticates through the RpcEdge, validates and maps its
// request with the wire library, calls the core and maps the answer back.
//
// Thread-safety: gRPC calls it from many threads; it holds no state of its own.
#ifndef FUSETUNE_SERVICE_TUNING_SERVICE_H_
#define FUSETUNE_SERVICE_TUNING_SERVICE_H_

#include <memory>

#include "grpcpp/impl/service_type.h"
#include "rpc_edge.h"
#include "server_core.h"

namespace fusetune {

// The service; `core` and `edge` must outlive it.
std::unique_ptr<grpc::Service> NewTuningService(ServerCore* core, const RpcEdge* edge);

}  // namespace fusetune

#endif  // FUSETUNE_SERVICE_TUNING_SERVICE_H_
