// Server: starts and stops the tuning service. The state lives in ServerCore
// (server_core.h), the two gRPC services in tuning_service.cc and worker_service.cc; this
// file checks the options, reads the token and TLS files, and wires the services, the
// health service and the metrics together.
#include "fusetune/service/server.h"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "fusetune/base/file.h"
#include "fusetune/base/strings.h"
#include "fusetune/proto/fusetune.grpc.pb.h"
#include "fusetune/wire/connection.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "metrics.h"
#include "report_pages.h"
#include "rpc_edge.h"
#include "server_core.h"
#include "tuning_service.h"
#include "worker_service.h"

namespace fusetune {
namespace {

// The file at `path`, its error saying what the file is for (`what`: "TLS certificate").
absl::StatusOr<std::string> ReadPemFile(const std::string& path, const char* what) {
  absl::StatusOr<std::string> pem = ReadFileToString(path);
  if (!pem.ok()) return absl::Status(pem.status().code(), Cat(what, ": ", pem.status().message()));
  return pem;
}

// Every RPC of the two services, from the proto's own descriptors, so the metrics cover a
// method as soon as the proto has it.
std::vector<std::string> RpcMethodNames() {
  std::vector<std::string> names;
  for (const char* full_name : {v1::TuningService::service_full_name(), v1::WorkerService::service_full_name()}) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(full_name);
    if (service == nullptr) continue;
    for (int i = 0; i < service->method_count(); ++i) names.push_back(service->method(i)->name());
  }
  return names;
}

absl::Status CheckOptions(const ServerOptions& options) {
  if (options.lease_ms <= 0 || options.heartbeat_ms <= 0 || options.refresh_ms <= 0 ||
      options.worker_alive_ms <= 0 || options.replica_poll_ms <= 0) {
    return absl::InvalidArgumentError(
        "lease_ms, heartbeat_ms, refresh_ms, worker_alive_ms and replica_poll_ms must be > 0");
  }
  if (options.max_concurrent_long_polls < 1 || options.max_concurrent_streams < 1 ||
      options.max_receive_message_bytes < 1024 || options.max_threads < 4) {
    return absl::InvalidArgumentError("concurrency caps must be >= 1, max_threads >= 4, messages >= 1 KiB");
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key file");
  }
  if (options.db_path.empty()) return absl::InvalidArgumentError("db_path is required");
  return ValidateServiceAddress(options.listen_address, "listen address", /*listening=*/true);
}

// The token (ResolveToken: given, else the token file's first line, else $FUSETUNE_TOKEN);
// one is required.
absl::StatusOr<std::string> ReadToken(const ServerOptions& options) {
  absl::StatusOr<std::string> token = ResolveToken(options.token, options.token_file);
  if (!token.ok()) return token.status();
  if (token->empty()) {
    return absl::InvalidArgumentError(
        "a token is required for workers and writes: give --token-file or set FUSETUNE_TOKEN");
  }
  return token;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const ServerOptions& options) {
  if (options.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  auto cert = ReadPemFile(options.tls_cert_file, "TLS certificate");
  if (!cert.ok()) return cert.status();
  auto key = ReadPemFile(options.tls_key_file, "TLS key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

class Server::Impl {
 public:
  Impl(const ServerOptions& options, std::string token, std::unique_ptr<Store> store,
       std::unique_ptr<ServiceMetrics> metrics)
      : options_(options),
        metrics_(std::move(metrics)),
        core_(options, std::move(store), metrics_.get()),
        edge_(std::move(token), options.open_reads, metrics_.get()) {}

  absl::Status Init() { return core_.Init(); }
  absl::Status StartGrpc();
  void Shutdown();
  void Wait() { core_.WaitForShutdown(); }

  int port() const { return port_; }
  int metrics_port() const { return metrics_->port(); }
  // The replica label, "{port}" replaced by the bound port (after StartGrpc).
  void NameReplica() {
    std::string name = options_.replica;
    if (const size_t at = name.find("{port}"); at != std::string::npos) {
      name.replace(at, 6, std::to_string(port_));
    }
    metrics_->SetReplica(std::move(name));
  }
  Store* store() { return core_.store(); }

 private:
  const ServerOptions options_;
  std::unique_ptr<ServiceMetrics> metrics_;
  ServerCore core_;
  RpcEdge edge_;
  // Services before the server: members die in reverse order, and gRPC needs its services
  // to outlive the server object.
  std::unique_ptr<grpc::Service> tuning_service_;
  std::unique_ptr<WorkerService> worker_service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::once_flag shutdown_once_;
};

absl::Status Server::Impl::StartGrpc() {
  auto creds = ServerCredentials(options_);
  if (!creds.ok()) return creds.status();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen_address, *creds, &port_);
  tuning_service_ = NewTuningService(&core_, &edge_);
  worker_service_ = std::make_unique<WorkerService>(&core_, &edge_, metrics_.get());
  builder.RegisterService(tuning_service_.get());
  builder.RegisterService(worker_service_.get());
  builder.SetMaxReceiveMessageSize(options_.max_receive_message_bytes);
  // gRPC sets SO_REUSEPORT by default: a second server would silently share a taken port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  grpc::ResourceQuota quota("fusetune-server");
  quota.SetMaxThreads(options_.max_threads);
  builder.SetResourceQuota(quota);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    server_.reset();
    return absl::UnavailableError(
        Cat("cannot listen on '", options_.listen_address, "' (address in use or invalid?)"));
  }
  if (auto* health = server_->GetHealthCheckService(); health != nullptr) {
    // The whole server ("") and each service by its full proto name; Shutdown turns them
    // all NOT_SERVING.
    health->SetServingStatus(true);
    for (const char* service : {v1::TuningService::service_full_name(), v1::WorkerService::service_full_name()}) {
      health->SetServingStatus(service, true);
    }
  }
  core_.StartRefresh();
  return absl::OkStatus();
}

void Server::Impl::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    core_.BeginShutdown();
    if (server_ != nullptr) {
      if (auto* health = server_->GetHealthCheckService(); health != nullptr) {
        health->SetServingStatus(false);
      }
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    }
    if (worker_service_ != nullptr) worker_service_->WaitForLongPolls();
    core_.StopRefresh();
  });
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  if (auto s = CheckOptions(options); !s.ok()) return s;
  auto token = ReadToken(options);
  if (!token.ok()) return token.status();
  auto store = Store::Open(options.db_path);
  if (!store.ok()) return store.status();
  // The HTML reports beside /metrics read through a connection of their own, read-only, so that
  // a page is never written from and the endpoint needs nothing the server core owns.
  MetricsEndpoint::PageHandler pages;
  if (!options.metrics_address.empty()) {
    StoreOptions read_only;
    read_only.access = StoreAccess::kReadOnly;
    absl::StatusOr<std::unique_ptr<Store>> reports_store = Store::Open(options.db_path, read_only);
    if (reports_store.ok()) pages = ReportPages(std::shared_ptr<Store>(*std::move(reports_store)), options.db_path);
  }
  auto metrics = ServiceMetrics::Create(options.metrics_address, RpcMethodNames(), std::move(pages));
  if (!metrics.ok()) return metrics.status();
  auto impl = std::make_unique<Impl>(options, std::move(*token), std::move(*store), std::move(*metrics));
  if (auto s = impl->Init(); !s.ok()) return s;
  if (auto s = impl->StartGrpc(); !s.ok()) return s;
  impl->NameReplica();
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { Shutdown(); }
void Server::Shutdown() { impl_->Shutdown(); }
void Server::Wait() { impl_->Wait(); }
int Server::port() const { return impl_->port(); }
int Server::metrics_port() const { return impl_->metrics_port(); }
Store* Server::store() { return impl_->store(); }

}  // namespace fusetune
