#include "server_connection.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <cstdlib>

#include "commands.h"
#include "fusetune/base/file.h"
#include "fusetune/base/strings.h"
#include "fusetune/base/time.h"
#include "fusetune/wire/connection.h"
#include "fusetune/wire/records_convert.h"
#include "fusetune/wire/status.h"

namespace fusetune::cli {
void ServerConnectionFlags::Register(CLI::App* command, Server server_flag, Timeout timeout_flag) {
  if (server_flag == Server::kWithDefault) {
    server = kDefaultServiceAddress;
    command->add_option("--server", server,
                        "address of `fusetune serve`, host:port; several replicas as host:port,host:port")
        ->capture_default_str();
  }
  command->add_option("--token-file", token_file,
                      "file whose first line is the service token (default: env FUSETUNE_TOKEN)");
  command->add_option("--tls-ca", tls_ca_file, "PEM root certificate: connect with TLS");
  if (timeout_flag == Timeout::kPerCall) {
    command->add_option("--timeout", timeout_s, "per-call deadline, seconds")
        ->capture_default_str()
        ->check(CLI::Range(0.1, 3600.0));
  }
}

absl::StatusOr<std::string> ServerConnectionFlags::Token() const { return ResolveToken("", token_file); }

absl::StatusOr<std::string> ServerConnectionFlags::TlsRootCertificates() const {
  if (tls_ca_file.empty()) return std::string();
  absl::StatusOr<std::string> pem = ReadFileToString(tls_ca_file);
  if (!pem.ok()) return absl::Status(pem.status().code(), Cat("--tls-ca: ", pem.status().message()));
  return pem;
}

absl::StatusOr<ServerConnection> ServerConnection::Open(const ServerConnectionFlags& flags) {
  absl::StatusOr<std::vector<std::string>> addresses = ParseServiceAddresses(flags.server, "--server");
  if (!addresses.ok()) return addresses.status();
  ServerConnection c;
  c.timeout_s_ = flags.timeout_s;
  absl::StatusOr<std::string> token = flags.Token();
  if (!token.ok()) return token.status();
  c.token_ = *std::move(token);
  absl::StatusOr<std::string> root_certificates = flags.TlsRootCertificates();
  if (!root_certificates.ok()) return root_certificates.status();
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!flags.tls_ca_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = *std::move(root_certificates);
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  c.channels_ = FailoverChannels::Create(*addresses, creds, grpc::ChannelArguments());
  for (size_t i = 0; i < c.channels_->size(); ++i) c.stubs_.push_back(v1::TuningService::NewStub(c.channels_->channel(i)));
  return c;
}

std::unique_ptr<grpc::ClientContext> ServerConnection::Context() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  AddBearerToken(*ctx, token_);
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000)));
  return ctx;
}

absl::StatusOr<int> UploadRegressions(const ServerConnectionFlags& flags, const std::vector<Regression>& rows) {
  auto connection = ServerConnection::Open(flags);
  if (!connection.ok()) return connection.status();
  return fusetune::UploadRegressions(connection->tuning(), connection->Context().get(), rows);
}

int RpcFailure(const std::string& command, const grpc::Status& status) {
  std::fprintf(stderr, "fusetune %s: %s: %s\n", command.c_str(), StatusCodeName(status.error_code()),
               status.error_message().c_str());
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT: return kExitUsage;
    case grpc::StatusCode::NOT_FOUND: return kExitNotFound;
    default: return kExitFailure;
  }
}

std::string UtcTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  return Rfc3339Utc(unix_ms);
}

}  // namespace fusetune::cli
