// How fusetune's processes address and connect to the tuning service: the one default port
// (`serve --listen`, `worker --server` and every client command), the check of a
// "host:port" flag, the channel arguments that bound gRPC's own reconnect backoff, and the
// shared token: where it comes from and how a call carries it.
//
// Thread-safety: pure functions and constants.
#ifndef FUSETUNE_WIRE_CONNECTION_H_
#define FUSETUNE_WIRE_CONNECTION_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/wire/address.h"
#include "grpcpp/client_context.h"
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

// ---- the shared token
// A call carries the token as the metadata entry "authorization: Bearer <token>"; the
// server's check parses the same two constants.
inline constexpr char kAuthorizationMetadata[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";
// The environment variable that holds the token when no token or token file is given.
inline constexpr char kTokenEnvironmentVariable[] = "FUSETUNE_TOKEN";

// The token of `serve`, `worker` and every client command, in this order: `token` when not
// empty; else the first line of `token_file` when one is named (even when that line is
// empty); else $FUSETUNE_TOKEN; else "" (no token). Surrounding whitespace is stripped.
// NotFound "cannot read token file '<path>'" when `token_file` cannot be read.
absl::StatusOr<std::string> ResolveToken(std::string_view token, const std::string& token_file);

// Adds "authorization: Bearer <token>" to `context`; nothing when `token` is empty.
void AddBearerToken(grpc::ClientContext& context, std::string_view token);

}  // namespace fusetune

#endif  // FUSETUNE_WIRE_CONNECTION_H_
