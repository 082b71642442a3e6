#include "rpc_edge.h"

#include <algorithm>
#include <string_view>

#include "fusetune/wire/connection.h"
#include "fusetune/wire/status.h"

namespace fusetune {
namespace {

// Equal-length-independent comparison: every byte of the longer input is visited, so the
// time taken does not reveal how many leading bytes matched.
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace

grpc::Status ToRpcStatus(grpc::ServerContextBase* ctx, const absl::Status& status) {
  if (const std::string reason = ErrorReason(status); !reason.empty() && ctx != nullptr) {
    ctx->AddTrailingMetadata(kErrorReasonMetadata, reason);
  }
  return ToGrpcStatus(status);
}

absl::Status RpcEdge::Authenticate(const grpc::ServerContextBase* ctx) const {
  const auto& md = ctx->client_metadata();
  auto it = md.find(kAuthorizationMetadata);
  if (it == md.end()) return absl::UnauthenticatedError("missing 'authorization: Bearer <token>' metadata");
  std::string_view value(it->second.data(), it->second.size());
  constexpr std::string_view kBearer = kBearerPrefix;
  if (value.substr(0, kBearer.size()) != kBearer || !ConstantTimeEquals(value.substr(kBearer.size()), token_)) {
    return absl::UnauthenticatedError("invalid token");
  }
  return absl::OkStatus();
}

}  // namespace fusetune
