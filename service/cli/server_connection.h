// Flags and a connection for the commands that talk to `fusetune serve` (submit, jobs,
// best --server, regressions, uploads of verdicts): address, token, optional TLS root
// certificate, deadline.
#ifndef FUSETUNE_SERVICE_CLI_SERVER_CONNECTION_H_
#define FUSETUNE_SERVICE_CLI_SERVER_CONNECTION_H_

#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "fusetune/db/store.h"
#include "fusetune/kernels/problem.h"
#include "fusetune/proto/fusetune.grpc.pb.h"
#include "fusetune/wire/failover.h"
#include "grpcpp/grpcpp.h"

namespace fusetune::cli {

// The one declaration of the server-connection flags: every command that talks to a server
// (`worker` included) registers them here.
struct ServerConnectionFlags {
  // host:port (kDefaultServiceAddress where --server has a default), or several replicas'
  // host:port,host:port (reads move on to the next when one is away: ServerConnection::Read)
  std::string server;
  std::string token_file;   // first line is the token; else env FUSETUNE_TOKEN; else none
  std::string tls_ca_file;  // PEM root certificate: connect with TLS
  double timeout_s = 10;    // per call

  // Which flags Register adds beside --token-file and --tls-ca.
  enum class Server { kNone, kWithDefault };     // --server, defaulting to kDefaultServiceAddress
  enum class Timeout { kNone, kPerCall };        // --timeout (a daemon has its own deadlines)

  // Adds --token-file and --tls-ca, and --server and --timeout as asked.
  void Register(CLI::App* command, Server server_flag, Timeout timeout_flag = Timeout::kPerCall);
  // Shorthand of the above: --server when `with_server`, and --timeout.
  void Register(CLI::App* command, bool with_server) {
    Register(command, with_server ? Server::kWithDefault : Server::kNone);
  }

  // The token (ResolveToken of fusetune/wire/connection.h: --token-file's first line, else
  // $FUSETUNE_TOKEN, else ""). NotFound when the token file cannot be read.
  absl::StatusOr<std::string> Token() const;
  // The PEM text of --tls-ca; "" when not given. NotFound when the file cannot be read.
  absl::StatusOr<std::string> TlsRootCertificates() const;
};

class ServerConnection {
 public:
  // NotFound when the token or CA file cannot be read; InvalidArgument for an address that
  // is not host:port (ParseServiceAddresses of the list).
  static absl::StatusOr<ServerConnection> Open(const ServerConnectionFlags& flags);

  // The stub of the current address (--server may name several replicas: a,b,c).
  v1::TuningService::Stub& tuning() { return *stubs_[channels_->current()]; }
  // A context with the token (when there is one) and the deadline.
  std::unique_ptr<grpc::ClientContext> Context() const;

  // Calls `method` (a read) at the current address, each call with a fresh Context(); with
  // several addresses, one that finds the service away (UNAVAILABLE, DEADLINE_EXCEEDED) is
  // made again at the next, each address once. A write (SubmitTuningJob) is not repeated (it
  // may have been stored): call it once through tuning().
  template <typename Request, typename Response>
  grpc::Status Read(grpc::Status (v1::TuningService::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                    const Request& request, Response* response) {
    grpc::Status status;
    for (size_t i = 0; i < channels_->size(); ++i) {
      std::unique_ptr<grpc::ClientContext> context = Context();
      status = (tuning().*method)(context.get(), request, response);
      if (!IsFailoverCode(status.error_code())) return status;
    }
    return status;
  }

 private:
  std::string token_;
  double timeout_s_ = 10;
  std::shared_ptr<FailoverChannels> channels_;
  std::vector<std::shared_ptr<v1::TuningService::Stub>> stubs_;  // one per address
};

// Uploads regression verdicts to the server of `flags` (ReportRegressions, one call, stored
// all or none) and returns how many it recorded. Errors: those of ServerConnection::Open;
// InvalidArgument naming the row ("regressions[i]...") for a row the server would refuse,
// before anything is sent; otherwise the RPC's status (UNAUTHENTICATED without the right
// token, UNAVAILABLE when the server is unreachable, DEADLINE_EXCEEDED after --timeout).
absl::StatusOr<int> UploadRegressions(const ServerConnectionFlags& flags, const std::vector<Regression>& rows);

// "fusetune <command>: <code>: <message>" on stderr; the exit code for the gRPC status
// (usage for INVALID_ARGUMENT, not found for NOT_FOUND, failure otherwise).
int RpcFailure(const std::string& command, const grpc::Status& status);

// A server timestamp for tables: "2026-12-01T14:35:49Z" (UTC), "-" for 0 (not yet).
std::string UtcTime(int64_t unix_ms);

// `fusetune best --server`: asks the server (GetBestConfig) and prints the answer with its
// provenance (exact / nearest with the source shape and distance / default). Exit 0 for any
// answer (a default is an answer), usage/failure codes as RpcFailure.
int RunRemoteBest(const AttentionProblem& problem, const std::string& device_class,
                  const ServerConnectionFlags& flags, bool json);

}  // namespace fusetune::cli

#endif  // FUSETUNE_SERVICE_CLI_SERVER_CONNECTION_H_
