// How fusetune's processes address and connect to the tuning service: the one default port
// (`serve --listen`, `worker --server` and every client command), the check of a
// "host:port" flag, and the channel arguments that bound gRPC's own reconnect backoff.
//
// Thread-safety: pure functions and constants.
#ifndef FUSETUNE_WIRE_CONNECTION_H_
#define FUSETUNE_WIRE_CONNECTION_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "fusetune/wire/address.h"
#include "grpcpp/support/channel_arguments.h"

namespace fusetune {

// The service's default port, and the address commands use when --server/--listen is not given.
inline constexpr int kDefaultServicePort = 50051;
inline constexpr char kDefaultServiceAddress[] = "127.0.0.1:50051";

// OK when `address` is a service address ParseHostPort accepts (port 0 only when
// `listening`); its InvalidArgument otherwise, with the default address as the example.
absl::Status ValidateServiceAddress(std::string_view address, std::string_view flag, bool listening = false);

// Channel arguments for a client of the service whose own retries back off from
// `initial_ms` up to `max_ms`: gRPC's reconnect backoff (by default 1 s growing to 120 s,
// which is what made a restarted server wait for its workers) starts at `initial_ms` and
// never exceeds `max_ms` (jitter included). Values are clamped to [1, INT_MAX] ms; initial
// is at most max.
grpc::ChannelArguments ReconnectChannelArguments(int64_t initial_ms, int64_t max_ms);

}  // namespace fusetune

#endif  // FUSETUNE_WIRE_CONNECTION_H_
