#include "fusetune/wire/failover.h"

#include <chrono>
#include <memory>
#include <string>

#include "fusetune/proto/fusetune.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace fusetune {
namespace {

TEST(ServiceAddresses, SplitsACommaSeparatedListAndChecksEachAddress) {
  absl::StatusOr<std::vector<std::string>> one = ParseServiceAddresses("tuner:50051", "--server");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, std::vector<std::string>{"tuner:50051"});
  absl::StatusOr<std::vector<std::string>> three =
      ParseServiceAddresses("a:1, 10.0.0.2:50051 ,[::1]:7", "--server");
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(*three, (std::vector<std::string>{"a:1", "10.0.0.2:50051", "[::1]:7"}));
  for (const char* bad : {"", "a:1,", ",a:1", "a:1,,b:2", "a:1,b", "a:1,b:0", "a:1;b:2"}) {
    absl::StatusOr<std::vector<std::string>> parsed = ParseServiceAddresses(bad, "--server");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(parsed.status().message().find("--server"), std::string::npos) << parsed.status();
  }
}

TEST(ServiceAddresses, OnlyAnAbsentServiceIsAReasonToTryTheNextAddress) {
  EXPECT_TRUE(IsFailoverCode(grpc::StatusCode::UNAVAILABLE));
  EXPECT_TRUE(IsFailoverCode(grpc::StatusCode::DEADLINE_EXCEEDED));
  for (grpc::StatusCode code : {grpc::StatusCode::OK, grpc::StatusCode::INVALID_ARGUMENT,
                                grpc::StatusCode::FAILED_PRECONDITION, grpc::StatusCode::UNAUTHENTICATED,
                                grpc::StatusCode::CANCELLED, grpc::StatusCode::UNIMPLEMENTED}) {
    EXPECT_FALSE(IsFailoverCode(code)) << code;
  }
}

// A gRPC server whose services implement nothing: every call there is UNIMPLEMENTED (an
// answer, so no reason to move on).
std::unique_ptr<grpc::Server> StartBareServer(int* port) {
  static v1::WorkerService::Service* const unimplemented = new v1::WorkerService::Service();
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), port);
  builder.RegisterService(unimplemented);
  return builder.BuildAndStart();
}

grpc::StatusCode CallCurrent(FailoverChannels& channels) {
  auto stub = v1::TuningService::NewStub(channels.channel(channels.current()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::GetBestConfigRequest req;
  v1::GetBestConfigResponse resp;
  return stub->GetBestConfig(&ctx, req, &resp).error_code();
}

TEST(FailoverChannels, ACallThatFindsTheServiceAwayMovesTheNextCallToTheNextAddress) {
  int gone_port = 0;
  std::unique_ptr<grpc::Server> gone = StartBareServer(&gone_port);
  ASSERT_NE(gone, nullptr);
  gone->Shutdown();
  gone->Wait();
  int up_port = 0;
  std::unique_ptr<grpc::Server> up = StartBareServer(&up_port);
  ASSERT_NE(up, nullptr);
  const std::string gone_address = "127.0.0.1:" + std::to_string(gone_port);
  const std::string up_address = "127.0.0.1:" + std::to_string(up_port);

  auto channels = FailoverChannels::Create({gone_address, up_address}, grpc::InsecureChannelCredentials(),
                                           grpc::ChannelArguments());
  ASSERT_EQ(channels->size(), 2u);
  EXPECT_EQ(channels->current(), 0u);
  EXPECT_EQ(CallCurrent(*channels), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(channels->current(), 1u);
  EXPECT_EQ(channels->address(1), up_address);
  EXPECT_EQ(CallCurrent(*channels), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(channels->current(), 1u) << "an answer keeps the address";

  // Both away: the calls go round the list.
  up->Shutdown();
  up->Wait();
  EXPECT_EQ(CallCurrent(*channels), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(channels->current(), 0u);
  // A failure reported for an address that is no longer current moves nothing.
  channels->Failed(1);
  EXPECT_EQ(channels->current(), 0u);
  channels->Failed(0);
  EXPECT_EQ(channels->current(), 1u);
}

TEST(FailoverChannels, OneAddressIsOnePlainChannel) {
  auto channels = FailoverChannels::Create({"127.0.0.1:1"}, grpc::InsecureChannelCredentials(), grpc::ChannelArguments());
  ASSERT_EQ(channels->size(), 1u);
  EXPECT_EQ(CallCurrent(*channels), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(channels->current(), 0u);
}

}  // namespace
}  // namespace fusetune
