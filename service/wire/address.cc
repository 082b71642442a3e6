#include "fusetune/wire/address.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fusetune {
namespace {

absl::Status Bad(std::string_view flag, std::string_view address, std::string_view what, std::string_view example) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(flag), " '", std::string(address), "': ",
                                                 std::string(what), " (expected host:port, e.g. ",
                                                 std::string(example), ")"));
}

}  // namespace

absl::StatusOr<HostPort> ParseHostPort(std::string_view address, std::string_view flag, bool listening,
                                       std::string_view example) {
  const size_t colon = address.rfind(':');
  if (address.empty()) return Bad(flag, address, "empty", example);
  if (colon == std::string_view::npos) return Bad(flag, address, "no port", example);
  std::string_view host = address.substr(0, colon);
  const std::string_view port_text = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    if (host.empty()) return Bad(flag, address, "empty IPv6 address", example);
    for (char c : host) {
      if (!(std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.')) {
        return Bad(flag, address, "not an IPv6 address in brackets", example);
      }
    }
  } else {
    if (host.empty()) return Bad(flag, address, "no host", example);
    for (char c : host) {
      // Host names and IPv4 addresses; a bare ':' means an unbracketed IPv6 address.
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) {
        return Bad(flag, address, c == ':' ? "an IPv6 host needs brackets" : "not a host name", example);
      }
    }
  }
  int port = -1;
  if (port_text.empty() || port_text.size() > 5 ||
      !std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      !absl::SimpleAtoi(absl::string_view(port_text.data(), port_text.size()), &port)) {
    return Bad(flag, address, "the port is not a number", example);
  }
  if (port > 65535 || (port == 0 && !listening)) {
    return Bad(flag, address, listening ? "the port must be in 0..65535" : "the port must be in 1..65535", example);
  }
  return HostPort{std::string(host), port};
}

}  // namespace fusetune
