#include "fusetune/wire/connection.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fstream>

#include "absl/strings/ascii.h"
#include "fusetune/base/strings.h"
#include "grpc/grpc.h"

namespace fusetune {

absl::Status ValidateServiceAddress(std::string_view address, std::string_view flag, bool listening) {
  return ParseHostPort(address, flag, listening, kDefaultServiceAddress).status();
}

grpc::ChannelArguments ReconnectChannelArguments(int64_t initial_ms, int64_t max_ms) {
  const int64_t max_total = std::clamp<int64_t>(max_ms, 1, INT_MAX);
  // gRPC adds up to +20% jitter to the capped backoff: cap at 5/6 of max_ms so that the
  // jittered delay stays within max_ms.
  const int max = static_cast<int>(std::max<int64_t>(1, max_total * 5 / 6));
  const int initial = static_cast<int>(std::clamp<int64_t>(initial_ms, 1, max));
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, initial);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, initial);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max);
  return args;
}

absl::StatusOr<std::string> ResolveToken(std::string_view token, const std::string& token_file) {
  if (!token.empty()) return std::string(absl::StripAsciiWhitespace(ToAbsl(token)));
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in) return absl::NotFoundError(Cat("cannot read token file '", token_file, "'"));
    std::string line;
    std::getline(in, line);
    return std::string(absl::StripAsciiWhitespace(line));
  }
  if (const char* env = std::getenv(kTokenEnvironmentVariable); env != nullptr) {
    return std::string(absl::StripAsciiWhitespace(env));
  }
  return std::string();
}

void AddBearerToken(grpc::ClientContext& context, std::string_view token) {
  if (token.empty()) return;
  context.AddMetadata(kAuthorizationMetadata, Cat(kBearerPrefix, token));
}

}  // namespace fusetune
