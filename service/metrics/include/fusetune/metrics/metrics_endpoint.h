// MetricsEndpoint: serves the Prometheus text exposition on http://HOST:PORT/metrics.
//
// A small HTTP/1.1 server of its own rather than prometheus-cpp's Exposer: the Exposer runs
// civetweb, whose threads are created with a fixed 100 KiB stack, and in a process that also
// loads cuBLAS (~111 KiB of static TLS, which glibc carves out of every thread's stack) that
// pthread_create fails with EINVAL, so /metrics could never start in a CUDA build. This
// server's threads use the process's default stack size.
//
// What it answers: GET or HEAD /metrics (a query string is ignored) with the text that
// `render` returns (text/plain; version=0.0.4); with a PageHandler, GET or HEAD of /reports and
// every path under /reports/ with the page it returns (read-only pages beside the metrics,
// under the same rules: whoever may scrape /metrics may read them; `fusetune serve` serves the
// HTML reports there); 404 for other paths, 405 for other
// methods, 400 for a malformed request, 503 when kMaxConnections requests are already being
// served. Every response closes its connection. A client that sends its request slower
// than kRequestTimeout, or does not read the response within kResponseTimeout, is dropped.
//
// Thread-safety: `render` is called from the endpoint's connection threads, possibly
// concurrently; it must be thread-safe and must outlive the endpoint. port() is safe from
// any thread. Destruction stops accepting, ends connections in progress and joins every
// thread.
#ifndef FUSETUNE_METRICS_METRICS_ENDPOINT_H_
#define FUSETUNE_METRICS_METRICS_ENDPOINT_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace fusetune {

class MetricsEndpoint {
 public:
  static constexpr int kMaxConnections = 16;
  static constexpr std::chrono::milliseconds kRequestTimeout{5000};
  static constexpr std::chrono::milliseconds kResponseTimeout{10000};

  // Listens on `address` ("host:port", "[v6-host]:port"; port 0 picks a free port) and
  // serves `render()` on /metrics. InvalidArgument when the address is malformed
  // (ParseHostPort, fusetune/wire/address.h); Unavailable, with the system's reason
  // ("Address already in use", "Cannot assign requested address", a name that does not
  // resolve), when it cannot listen there.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const std::string& address,
                                                                std::function<std::string()> render);

  // A page served beside /metrics.
  struct Page {
    std::string content_type;  // e.g. "text/html; charset=utf-8"
    std::string body;
  };
  // Answers a GET or HEAD of /reports or a path under /reports/: `path` is the request's path
  // with %XX escapes decoded (the query string cut off), starting with "/reports". NotFound
  // becomes 404, InvalidArgument 400, any other error 500, each with the status's message.
  // Called from the connection threads, possibly concurrently: it must be thread-safe and
  // outlive the endpoint.
  using PageHandler = std::function<absl::StatusOr<Page>(const std::string& path)>;

  // Start, also answering /reports... with `pages` (null: 404 there, as without it).
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const std::string& address,
                                                                std::function<std::string()> render,
                                                                PageHandler pages);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // The port it listens on (the chosen one when started with port 0).
  int port() const;

 private:
  struct State;
  explicit MetricsEndpoint(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace fusetune

#endif  // FUSETUNE_METRICS_METRICS_ENDPOINT_H_
