// The client-facing wire helpers that are not conversions of a message: provenance and
// status mapping, the request bounds shared by every RPC.
#include <set>
#include <string>

#include "fusetune/wire/convert.h"
#include "fusetune/wire/provenance.h"
#include "fusetune/wire/status.h"
#include "gtest/gtest.h"

namespace fusetune {
namespace {

TEST(WireProvenance, ServiceProvenancesSurviveTheProto) {
  for (ConfigProvenance p : {ConfigProvenance::kExact, ConfigProvenance::kNearest, ConfigProvenance::kDefault}) {
    EXPECT_EQ(ConfigProvenanceFromProto(ConfigProvenanceToProto(p)), p) << ConfigProvenanceName(p);
  }
}

TEST(WireProvenance, FallbackHasNoProtoValueAndUnknownValuesReadAsFallback) {
  EXPECT_EQ(ConfigProvenanceToProto(ConfigProvenance::kFallback), v1::GetBestConfigResponse::PROVENANCE_UNSPECIFIED);
  EXPECT_EQ(ConfigProvenanceFromProto(v1::GetBestConfigResponse::PROVENANCE_UNSPECIFIED),
            ConfigProvenance::kFallback);
  EXPECT_EQ(ConfigProvenanceFromProto(static_cast<v1::GetBestConfigResponse::Provenance>(99)),
            ConfigProvenance::kFallback);
}

TEST(WireProvenance, NamesAreTheLowercaseWords) {
  EXPECT_EQ(ConfigProvenanceName(ConfigProvenance::kExact), "exact");
  EXPECT_EQ(ConfigProvenanceName(ConfigProvenance::kNearest), "nearest");
  EXPECT_EQ(ConfigProvenanceName(ConfigProvenance::kDefault), "default");
  EXPECT_EQ(ConfigProvenanceName(ConfigProvenance::kFallback), "fallback");
}

TEST(WireStatus, ErrorReasonTravelsWithTheStatusAndOkStaysOk) {
  absl::Status refused = WithErrorReason(absl::FailedPreconditionError("who?"), kReasonWorkerNotRegistered);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.message(), "who?");
  EXPECT_EQ(ErrorReason(refused), kReasonWorkerNotRegistered);
  EXPECT_TRUE(WithErrorReason(absl::OkStatus(), kReasonWorkerNotRegistered).ok());
  EXPECT_EQ(ErrorReason(absl::FailedPreconditionError("plain")), "");
}

TEST(WireStatus, CodeAndMessageSurviveGrpc) {
  absl::Status back = FromGrpcStatus(ToGrpcStatus(absl::ResourceExhaustedError("too many")));
  EXPECT_EQ(back.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(back.message(), "too many");
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

TEST(WireStatus, CodeNamesAreGrpcsCanonicalSpelling) {
  EXPECT_STREQ(StatusCodeName(grpc::StatusCode::OK), "OK");
  EXPECT_STREQ(StatusCodeName(grpc::StatusCode::INVALID_ARGUMENT), "INVALID_ARGUMENT");
  EXPECT_STREQ(StatusCodeName(grpc::StatusCode::DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
  EXPECT_STREQ(StatusCodeName(grpc::StatusCode::RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
  EXPECT_STREQ(StatusCodeName(grpc::StatusCode::DATA_LOSS), "DATA_LOSS");
  EXPECT_STREQ(StatusCodeName(grpc::StatusCode::UNAUTHENTICATED), "UNAUTHENTICATED");
  EXPECT_STREQ(StatusCodeName(static_cast<grpc::StatusCode>(17)), "UNKNOWN");
  EXPECT_STREQ(StatusCodeName(static_cast<grpc::StatusCode>(-1)), "UNKNOWN");
  // Every code has its own name.
  std::set<std::string> names;
  for (int code = 0; code <= 16; ++code) names.insert(StatusCodeName(static_cast<grpc::StatusCode>(code)));
  EXPECT_EQ(names.size(), 17u);
}

TEST(WireBounds, ListLimitZeroMeansDefaultAndOutOfRangeNamesTheRange) {
  EXPECT_EQ(*ListLimitFromProto(0, 100, 1000), 100);
  EXPECT_EQ(*ListLimitFromProto(7, 100, 1000), 7);
  EXPECT_EQ(*ListLimitFromProto(1000, 100, 1000), 1000);
  for (int bad : {-1, 1001}) {
    auto limit = ListLimitFromProto(bad, 100, 1000);
    ASSERT_FALSE(limit.ok());
    EXPECT_EQ(limit.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(limit.status().message(), "limit: must be in [1, 1000] (0 = 100)");
  }
}

TEST(WireBounds, TextLongerThanItsBoundIsRefusedNamingTheField) {
  EXPECT_TRUE(ValidateText(std::string(10, 'x'), 10, "error").ok());
  EXPECT_EQ(ValidateText(std::string(11, 'x'), 10, "error").message(), "error: longer than 10 characters (11)");
}

}  // namespace
}  // namespace fusetune
