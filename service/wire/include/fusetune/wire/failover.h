// Several addresses of one service (`--server a:1,b:2`: replicas of `fusetune serve` over one
// database) and the channels a client keeps to them: calls go to the current address, and a
// call that ends UNAVAILABLE or DEADLINE_EXCEEDED there makes the next address current, so the
// caller's own retry goes to another replica. One address behaves as a plain channel (a DNS
// name with several records is gRPC's own business, as before: its pick_first policy tries
// them in turn).
//
// Thread-safety: FailoverChannels is thread-safe; its channels may be used from any thread.
#ifndef FUSETUNE_WIRE_FAILOVER_H_
#define FUSETUNE_WIRE_FAILOVER_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/status.h"

namespace fusetune {

// Splits a comma-separated list of service addresses, each checked by ValidateServiceAddress
// (surrounding spaces ignored): InvalidArgument naming `flag` for an empty list, an empty
// entry or a malformed address.
absl::StatusOr<std::vector<std::string>> ParseServiceAddresses(std::string_view addresses, std::string_view flag);

// Whether a call that ended with `code` should be tried at another address: the service did
// not answer (UNAVAILABLE: refused, reset, shutting down; DEADLINE_EXCEEDED: no answer in time).
bool IsFailoverCode(grpc::StatusCode code);

class FailoverChannels {
 public:
  // One channel per address (connecting lazily), each watching how its calls end.
  static std::shared_ptr<FailoverChannels> Create(const std::vector<std::string>& addresses,
                                                  const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                                                  const grpc::ChannelArguments& arguments);

  size_t size() const { return channels_.size(); }
  // The index of the current address, and its channel.
  size_t current() const { return current_->load(std::memory_order_relaxed); }
  const std::shared_ptr<grpc::Channel>& channel(size_t index) const { return channels_[index]; }
  const std::string& address(size_t index) const { return addresses_[index]; }
  // Makes the address after `failed` current, unless another call already moved on from it.
  void Failed(size_t failed);

 private:
  FailoverChannels() = default;
  std::vector<std::string> addresses_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  // Shared with the channels' interceptors, which may outlive this object.
  std::shared_ptr<std::atomic<size_t>> current_ = std::make_shared<std::atomic<size_t>>(0);
};

}  // namespace fusetune

#endif  // FUSETUNE_WIRE_FAILOVER_H_
