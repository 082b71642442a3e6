#include "fusetune/wire/status.h"

#include "absl/strings/cord.h"
#include "absl/types/optional.h"

namespace fusetune {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    default: return "UNKNOWN";
  }
}

absl::Status FromGrpcCall(const grpc::Status& status, const grpc::ClientContext& finished_call) {
  absl::Status out = FromGrpcStatus(status);
  if (out.ok()) return out;
  const auto& trailers = finished_call.GetServerTrailingMetadata();
  if (auto it = trailers.find(kErrorReasonMetadata); it != trailers.end()) {
    out.SetPayload(kErrorReasonMetadata, absl::Cord(absl::string_view(it->second.data(), it->second.size())));
  }
  return out;
}

absl::Status WithErrorReason(absl::Status status, std::string_view reason) {
  if (!status.ok()) {
    status.SetPayload(kErrorReasonMetadata, absl::Cord(absl::string_view(reason.data(), reason.size())));
  }
  return status;
}

std::string ErrorReason(const absl::Status& status) {
  absl::optional<absl::Cord> reason = status.GetPayload(kErrorReasonMetadata);
  return reason ? std::string(*reason) : std::string();
}

}  // namespace fusetune
