// Server: fusetune's gRPC service (TuningService + WorkerService + grpc.health.v1) over the
// SQLite Store, with a Prometheus /metrics exporter.
//
// What it guarantees (see service/server/README.md for the full contract):
//   * reads (GetBestConfig, BatchGetBestConfig) are answered from an in-memory snapshot of
//     the best configs, refreshed after every CompleteJob, whenever the database's shared-state
//     stamp shows them changed (read every `replica_poll_ms`) and every `refresh_ms` (so writes
//     by other processes, e.g. `fusetune sweep` or another replica, show up within about
//     `replica_poll_ms`); a job queued through another replica wakes the long-polls here
//     within the same period;
//   * a lease that expires returns its job to the queue (checked every refresh period and by
//     every LeaseJob); trials are idempotent by trial id; a job completes once;
//   * every request is bounded (INVALID_ARGUMENT) and concurrent long-polls / trial streams
//     are capped (RESOURCE_EXHAUSTED); worker RPCs and writes need the token, compared in
//     constant time (UNAUTHENTICATED, nothing written); reads too unless `open_reads`.
//
// Thread-safety: Start/Shutdown/Wait may be called from any thread; Shutdown is idempotent
// and also runs in the destructor.
#ifndef FUSETUNE_SERVICE_SERVER_H_
#define FUSETUNE_SERVICE_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/db/store.h"

namespace fusetune {

// A change point of one bench cell's per-commit medians (a cell's history is identified by
// device class, suite, problem and config), as the metrics export it
// (fusetune_change_point_timestamp_seconds, a dashboard annotation).
struct ChangePointMark {
  std::string device_class;
  std::string suite;
  std::string problem_key;
  std::string config_key;
  std::string commit;     // the first commit of the new level
  std::string direction;  // "slower" or "faster"
  // The annotation's time (Unix ms, as every record stores time; exported in Unix seconds).
  // 0: when the commit's bench run finished, looked up in the exported bench history; the
  // mark is left out when that commit is not in it.
  int64_t unix_ms = 0;
};

struct ServerOptions {
  std::string listen_address = "127.0.0.1:0";  // host:port; port 0 picks a free one
  std::string db_path;                         // SQLite file (":memory:" for tests)
  // The shared token: `token` if set, else the first line of `token_file`, else the
  // environment variable FUSETUNE_TOKEN. Start fails when none gives a token.
  std::string token;
  std::string token_file;
  bool open_reads = false;         // true: GetBestConfig/Get*/List* need no token
  std::string tls_cert_file;       // PEM; TLS when both are set (both or neither)
  std::string tls_key_file;
  int64_t lease_ms = 60000;        // lease granted by LeaseJob / renewed by Heartbeat
  int64_t heartbeat_ms = 10000;    // how often workers are told to heartbeat
  int64_t worker_alive_ms = 30000; // a worker is "alive" if it heartbeat within this window
  int64_t refresh_ms = 2000;       // expire leases, reload best configs, update gauges
  // How often the database's SharedStateStamp is read, so that what another replica over the
  // same database changed (best configs, the job queue) is seen within this period: a changed
  // stamp reloads the best configs or wakes the long-polls at once (service/server/README.md,
  // "Several replicas").
  int64_t replica_poll_ms = 250;
  // The replica="..." label on every /metrics series; empty: none (`fusetune serve` always
  // names one, by default "<host name>:{port}"). "{port}" in it becomes the bound gRPC port.
  std::string replica;
  std::string metrics_address = "127.0.0.1:0";  // Prometheus /metrics; empty = none
  int max_concurrent_long_polls = 64;   // LeaseJob waits beyond this: RESOURCE_EXHAUSTED
  int max_concurrent_streams = 16;      // ReportTrials streams beyond this: RESOURCE_EXHAUSTED
  int max_receive_message_bytes = 4 << 20;
  int max_threads = 256;                // gRPC sync server thread cap
  // The stored change points, newest first, for the metrics (which keep the newest 500, see
  // service/server/README.md): called with the server's store at start and on the background
  // refresh thread every refresh_ms. Unset: the store's own change points (ListChangePoints,
  // what `fusetune history --record` stored); an error keeps the previous ones.
  std::function<absl::StatusOr<std::vector<ChangePointMark>>(Store&)> list_change_points;
};

class Server {
 public:
  // Opens the store, starts the exporter and the gRPC server. InvalidArgument for bad
  // options (no token, half a TLS pair, non-positive durations, a listen address that is not
  // host:port), NotFound when a token or
  // TLS file is missing, Unavailable when an address cannot be bound (the message names
  // it), the store's error when the database cannot be opened.
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options);
  ~Server();

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Stops accepting RPCs, wakes long-polls, waits up to 2 s for in-flight RPCs, stops the
  // background thread and the exporter. Idempotent.
  void Shutdown();
  // Blocks until Shutdown() has been called (from another thread or a signal handler's
  // helper thread).
  void Wait();

  int port() const;          // the gRPC port actually bound
  int metrics_port() const;  // 0 when metrics are disabled
  // The server's store (the same connection the RPCs use); for tests and the CLI.
  Store* store();

  class Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fusetune

#endif  // FUSETUNE_SERVICE_SERVER_H_
