// TLS: with a certificate and key the server speaks only TLS; a client trusting the
// certificate gets answers, a plaintext client does not.
#include <fstream>
#include <sstream>

#include "fusetune/service/server.h"
#include "server_test_util.h"

namespace fusetune::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ServerTls, ServesTlsClientsAndRefusesPlaintext) {
  ScratchDir dir;
  ServerOptions options;
  options.db_path = dir.File("fusetune.db");
  options.token = kToken;
  options.metrics_address.clear();
  options.tls_cert_file = FUSETUNE_TESTDATA "/server.crt";
  options.tls_key_file = FUSETUNE_TESTDATA "/server.key";
  auto server = Server::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();

  v1::GetBestConfigRequest req;
  *req.mutable_problem() = SeedProblem(128);
  req.set_device_class(kCpuClass);
  v1::GetBestConfigResponse resp;

  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadAll(options.tls_cert_file);
  ASSERT_FALSE(ssl.pem_root_certs.empty());
  auto tls = v1::TuningService::NewStub(
      grpc::CreateChannel("localhost:" + std::to_string((*server)->port()), grpc::SslCredentials(ssl)));
  grpc::Status ok = tls->GetBestConfig(Ctx().get(), req, &resp);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(resp.provenance(), v1::GetBestConfigResponse::DEFAULT);

  auto plain = v1::TuningService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials()));
  auto ctx = Ctx();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  EXPECT_FALSE(plain->GetBestConfig(ctx.get(), req, &resp).ok());

  // A missing key file is reported, not crashed on.
  options.tls_key_file = dir.File("missing.key");
  options.db_path = dir.File("other.db");
  EXPECT_EQ(Server::Start(options).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace fusetune::testing
