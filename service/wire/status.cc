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
