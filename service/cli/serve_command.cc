// fusetune serve: the tuning service (gRPC TuningService + WorkerService, health, /metrics)
// over a SQLite database. SIGTERM/SIGINT shut it down gracefully (long-polls end, in-flight
// RPCs get 2 s).
#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "commands.h"
#include "fusetune/db/store.h"
#include "fusetune/wire/connection.h"
#include "fusetune/service/server.h"
#include "problem_flags.h"

namespace fusetune::cli {
namespace {

struct ServeFlags {
  ServerOptions options;
  std::string metrics = "127.0.0.1:9464";
  std::string port_file;
};

int RunServe(ServeFlags f) {
  const std::string cmd = "serve";
  f.options.metrics_address = f.metrics == "off" ? "" : f.metrics;
  if (f.options.replica.empty()) {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') std::snprintf(name, sizeof(name), "localhost");
    f.options.replica = std::string(name) + ":{port}";
  }
  // Block the stop signals in every thread (gRPC's included, which start in Start); this
  // thread takes them with sigwait below.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  auto server = Server::Start(f.options);
  if (!server.ok()) {
    pthread_sigmask(SIG_UNBLOCK, &stop, nullptr);
    if (absl::IsInvalidArgument(server.status())) return UsageError(cmd, std::string(server.status().message()));
    return Failure(cmd, std::string(server.status().message()));
  }
  const std::string host = f.options.listen_address.substr(0, f.options.listen_address.rfind(':'));
  std::printf("fusetune serve: listening on %s:%d (db %s, %s reads%s)\n", host.c_str(), (*server)->port(),
              RedactDatabaseUrl(f.options.db_path).c_str(), f.options.open_reads ? "open" : "token-guarded",
              f.options.tls_cert_file.empty() ? "" : ", TLS");
  if ((*server)->metrics_port() > 0) {
    const std::string mhost = f.metrics.substr(0, f.metrics.rfind(':'));
    std::printf("fusetune serve: metrics on http://%s:%d/metrics\n", mhost.c_str(), (*server)->metrics_port());
  }
  std::fflush(stdout);
  if (!f.port_file.empty()) {
    // Written whole then renamed, so a reader never sees half a file.
    {
      std::ofstream out(f.port_file + ".tmp");
      out << (*server)->port() << " " << (*server)->metrics_port() << "\n";
    }
    std::rename((f.port_file + ".tmp").c_str(), f.port_file.c_str());
  }
  int sig = 0;
  sigwait(&stop, &sig);
  std::printf("fusetune serve: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  std::fflush(stdout);
  (*server)->Shutdown();
  server->reset();
  pthread_sigmask(SIG_UNBLOCK, &stop, nullptr);
  return kExitOk;
}

}  // namespace

void AddServeCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<ServeFlags>();
  flags->options.listen_address = kDefaultServiceAddress;
  flags->options.db_path = "./fusetune.db";
  CLI::App* serve = app.add_subcommand("serve", "Run the tuning service (gRPC + /metrics) over a database.");
  serve->add_option("--listen", flags->options.listen_address, "gRPC address host:port (port 0 = any free port)")
      ->capture_default_str();
  AddDatabaseOption(serve, &flags->options.db_path, "SQLite database file (created if absent)");
  serve->add_option("--metrics", flags->metrics, "Prometheus /metrics address host:port, or 'off'")
      ->capture_default_str();
  serve->add_option("--token-file", flags->options.token_file,
                    "file whose first line is the token workers and writers send (default: env FUSETUNE_TOKEN)");
  serve->add_flag("--open-reads", flags->options.open_reads, "serve reads (GetBestConfig, Get/List*) without a token");
  serve->add_option("--tls-cert", flags->options.tls_cert_file, "PEM certificate: serve TLS (with --tls-key)");
  serve->add_option("--tls-key", flags->options.tls_key_file, "PEM private key for --tls-cert");
  serve->add_option("--lease-ms", flags->options.lease_ms, "job lease length, ms")->capture_default_str()->check(
      CLI::Range(int64_t{100}, int64_t{86400000}));
  serve->add_option("--heartbeat-ms", flags->options.heartbeat_ms, "heartbeat period told to workers, ms")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{10}, int64_t{3600000}));
  serve->add_option("--refresh-ms", flags->options.refresh_ms,
                    "period of lease expiry, best-config snapshot and gauge refresh, ms")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{10}, int64_t{3600000}));
  serve->add_option("--replica", flags->options.replica,
                    "this replica's name, the replica label of every /metrics series (default <host name>:<port>)");
  serve->add_option("--replica-poll-ms", flags->options.replica_poll_ms,
                    "how often the database is polled for what other replicas changed (best configs, the queue), ms")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{10}, int64_t{3600000}));
  serve->add_option("--port-file", flags->port_file, "write '<grpc port> <metrics port>' here once serving");
  SetAction(serve, context, [flags] { return RunServe(*flags); });
}

}  // namespace fusetune::cli
