#include "fusetune/wire/connection.h"

#include <map>
#include <string>

#include "grpc/grpc.h"
#include "gtest/gtest.h"

namespace fusetune {
namespace {

std::map<std::string, int> IntArgs(const grpc::ChannelArguments& args) {
  std::map<std::string, int> out;
  const grpc_channel_args c = args.c_channel_args();
  for (size_t i = 0; i < c.num_args; ++i) {
    if (c.args[i].type == GRPC_ARG_INTEGER) out[c.args[i].key] = c.args[i].value.integer;
  }
  return out;
}

TEST(ServiceAddress, AcceptsHostPortFormsAndRefusesTheRestAsInvalidArgument) {
  for (const char* ok : {"127.0.0.1:50051", "tuner:1", "tuner.example.com:65535", "[::1]:50051", "my_host-2:80"}) {
    EXPECT_TRUE(ValidateServiceAddress(ok, "--server").ok()) << ok;
  }
  EXPECT_TRUE(ValidateServiceAddress("127.0.0.1:0", "--listen", /*listening=*/true).ok());
  EXPECT_TRUE(ValidateServiceAddress("[::]:0", "--listen", /*listening=*/true).ok());
  for (const char* bad : {"", "nonsense", "127.0.0.1", "127.0.0.1:", ":50051", "127.0.0.1:0", "127.0.0.1:65536",
                          "127.0.0.1:5x", "127.0.0.1:-1", "::1:50051", "[]:1", "a b:1", "host:123456"}) {
    absl::Status s = ValidateServiceAddress(bad, "--server");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "'" << bad << "'";
    EXPECT_NE(s.message().find("--server"), std::string::npos) << s.message();
  }
}

TEST(ServiceAddress, TheDefaultAddressUsesTheDefaultPort) {
  EXPECT_TRUE(ValidateServiceAddress(kDefaultServiceAddress, "--server").ok());
  EXPECT_EQ(std::string(kDefaultServiceAddress), "127.0.0.1:" + std::to_string(kDefaultServicePort));
}

TEST(ReconnectChannelArguments, BoundGrpcsReconnectBackoffByTheCallersSettingsJitterIncluded) {
  auto args = IntArgs(ReconnectChannelArguments(100, 1200));
  EXPECT_EQ(args[GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS], 100);
  EXPECT_EQ(args[GRPC_ARG_MIN_RECONNECT_BACKOFF_MS], 100);
  // gRPC adds up to 20% jitter: 1000 * 1.2 = 1200.
  EXPECT_EQ(args[GRPC_ARG_MAX_RECONNECT_BACKOFF_MS], 1000);
  // Nonsense in, bounded values out.
  auto clamped = IntArgs(ReconnectChannelArguments(5000, 600));
  EXPECT_EQ(clamped[GRPC_ARG_MAX_RECONNECT_BACKOFF_MS], 500);
  EXPECT_EQ(clamped[GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS], 500);
  auto tiny = IntArgs(ReconnectChannelArguments(0, 0));
  EXPECT_GE(tiny[GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS], 1);
  EXPECT_GE(tiny[GRPC_ARG_MAX_RECONNECT_BACKOFF_MS], 1);
}

}  // namespace
}  // namespace fusetune
