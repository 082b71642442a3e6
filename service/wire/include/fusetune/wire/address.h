// The "host:port" addresses fusetune's processes listen on and connect to (the service's
// --listen/--server, the /metrics endpoints): one grammar and one set of messages for all.
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_WIRE_ADDRESS_H_
#define FUSETUNE_WIRE_ADDRESS_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fusetune {

struct HostPort {
  std::string host;  // a host name, an IPv4 address, or an IPv6 address without its brackets
  int port = 0;
};

// Parses "host:port": a host name, IPv4 address or bracketed IPv6 address ("[::1]:50051"),
// then a decimal port in 1..65535 (also 0 when `listening`: any free port). InvalidArgument
// naming `flag`, what is wrong (no port, a bad port, no host) and `example` otherwise.
absl::StatusOr<HostPort> ParseHostPort(std::string_view address, std::string_view flag, bool listening,
                                       std::string_view example);

}  // namespace fusetune

#endif  // FUSETUNE_WIRE_ADDRESS_H_
