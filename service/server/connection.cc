#include "fusetune/service/connection.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpc/grpc.h"

namespace fusetune {
namespace {

absl::Status Bad(std::string_view flag, std::string_view address, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(flag), " '", std::string(address), "': ",
                                                 std::string(what), " (expected host:port, e.g. ",
                                                 kDefaultServiceAddress, ")"));
}

}  // namespace

absl::Status ValidateServiceAddress(std::string_view address, std::string_view flag, bool listening) {
  const size_t colon = address.rfind(':');
  if (address.empty()) return Bad(flag, address, "empty");
  if (colon == std::string_view::npos) return Bad(flag, address, "no port");
  std::string_view host = address.substr(0, colon);
  const std::string_view port_text = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    if (host.empty()) return Bad(flag, address, "empty IPv6 address");
    for (char c : host) {
      if (!(std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.')) {
        return Bad(flag, address, "not an IPv6 address in brackets");
      }
    }
  } else {
    if (host.empty()) return Bad(flag, address, "no host");
    for (char c : host) {
      // Host names and IPv4 addresses; a bare ':' means an unbracketed IPv6 address.
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) {
        return Bad(flag, address, c == ':' ? "an IPv6 host needs brackets" : "not a host name");
      }
    }
  }
  int port = -1;
  if (port_text.empty() || port_text.size() > 5 ||
      !std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      !absl::SimpleAtoi(absl::string_view(port_text.data(), port_text.size()), &port)) {
    return Bad(flag, address, "the port is not a number");
  }
  if (port > 65535 || (port == 0 && !listening)) {
    return Bad(flag, address, listening ? "the port must be in 0..65535" : "the port must be in 1..65535");
  }
  return absl::OkStatus();
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

}  // namespace fusetune
