#include "fusetune/wire/connection.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
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

// Sets $FUSETUNE_TOKEN (or unsets it) for one test and restores it afterwards.
class TokenEnvironment {
 public:
  explicit TokenEnvironment(const char* value) {
    if (const char* old = std::getenv(kTokenEnvironmentVariable)) saved_ = old;
    if (value != nullptr) {
      ::setenv(kTokenEnvironmentVariable, value, 1);
    } else {
      ::unsetenv(kTokenEnvironmentVariable);
    }
  }
  ~TokenEnvironment() {
    if (saved_.has_value()) {
      ::setenv(kTokenEnvironmentVariable, saved_->c_str(), 1);
    } else {
      ::unsetenv(kTokenEnvironmentVariable);
    }
  }

 private:
  std::optional<std::string> saved_;
};

std::string WriteTokenFile(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::path(::testing::TempDir()) / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(ResolveToken, GivenTokenBeatsTheFileAndTheEnvironment) {
  TokenEnvironment env("from-env");
  const std::string file = WriteTokenFile("given_token", "from-file\n");
  EXPECT_EQ(ResolveToken("  given \n", file).value(), "given");
}

TEST(ResolveToken, FileFirstLineBeatsTheEnvironment) {
  TokenEnvironment env("from-env");
  const std::string file = WriteTokenFile("file_token", "  from-file \t\nsecond line\n");
  EXPECT_EQ(ResolveToken("", file).value(), "from-file");
}

TEST(ResolveToken, NamedFileWithAnEmptyFirstLineGivesNoTokenNotTheEnvironment) {
  TokenEnvironment env("from-env");
  const std::string file = WriteTokenFile("empty_token", "\nfrom-second-line\n");
  EXPECT_EQ(ResolveToken("", file).value(), "");
}

TEST(ResolveToken, EnvironmentWhenNoTokenOrFileIsGiven) {
  TokenEnvironment env(" from-env\n");
  EXPECT_EQ(ResolveToken("", "").value(), "from-env");
}

TEST(ResolveToken, NothingGivenIsNoToken) {
  TokenEnvironment env(nullptr);
  EXPECT_EQ(ResolveToken("", "").value(), "");
}

TEST(ResolveToken, UnreadableFileIsNotFoundNamingIt) {
  TokenEnvironment env("from-env");
  absl::StatusOr<std::string> token = ResolveToken("", "/no/such/dir/token");
  ASSERT_FALSE(token.ok());
  EXPECT_TRUE(absl::IsNotFound(token.status()));
  EXPECT_EQ(token.status().message(), "cannot read token file '/no/such/dir/token'");
}

TEST(BearerToken, PrefixIsTheOneTheServerParses) {
  EXPECT_STREQ(kAuthorizationMetadata, "authorization");
  EXPECT_STREQ(kBearerPrefix, "Bearer ");
}

}  // namespace
}  // namespace fusetune
