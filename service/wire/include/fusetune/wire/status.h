// Status across the wire: absl::Status (what fusetune's code returns) to and from
// grpc::Status (what an RPC carries), and the machine-readable error reasons a status may
// carry beside its message (fusetune.proto, "Error reasons").
//
// A reason travels as the payload kErrorReasonMetadata of an absl::Status inside fusetune
// and as the trailing metadata entry of the same name on the wire: the server's RPC edge
// copies one to the other, FromGrpcCall copies it back on the client side.
//
// Thread-safety: pure functions and constants.
#ifndef FUSETUNE_WIRE_STATUS_H_
#define FUSETUNE_WIRE_STATUS_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace fusetune {

// absl and gRPC share the canonical status codes; these map one to the other (code and
// message; payloads do not travel in a grpc::Status).
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// The canonical name of a gRPC status code, as gRPC's status documentation spells it ("OK",
// "INVALID_ARGUMENT", ..., "UNAUTHENTICATED"); "UNKNOWN" for a value outside the 17 codes.
// The one table of these names: the server's metrics label and the CLI's error lines use it.
const char* StatusCodeName(grpc::StatusCode code);

// ---- error reasons
// Some errors carry a machine-readable reason in the trailing metadata entry
// kErrorReasonMetadata, so that a client branches on it instead of on message text.
inline constexpr char kErrorReasonMetadata[] = "fusetune-error-reason";
// FAILED_PRECONDITION: the worker named by the call is not registered with this server (a
// fresh database, or a server that never saw it): RegisterWorker, then retry the call.
inline constexpr char kReasonWorkerNotRegistered[] = "WORKER_NOT_REGISTERED";

// `status` carrying `reason` (its kErrorReasonMetadata payload). An OK status stays OK.
absl::Status WithErrorReason(absl::Status status, std::string_view reason);

// FromGrpcStatus of a finished call, keeping the reason the server sent (if any) as the
// payload kErrorReasonMetadata of the returned status.
absl::Status FromGrpcCall(const grpc::Status& status, const grpc::ClientContext& finished_call);
// The reason carried by `status` (WithErrorReason or FromGrpcCall); "" when none.
std::string ErrorReason(const absl::Status& status);

}  // namespace fusetune

#endif  // FUSETUNE_WIRE_STATUS_H_
