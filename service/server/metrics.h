// ServiceMetrics: the server's Prometheus series, exposed in the text format on /metrics by
// a MetricsEndpoint (service/metrics). Internal to service/server.
//
// Series (every name is listed in dashboards/ and checked by dashboards_test; units are
// Prometheus base units):
//   fusetune_rpc_requests_total{method,code}          counter
//   fusetune_rpc_latency_seconds{method}              histogram: handling time
//   fusetune_jobs{state}                               gauge: queue depth by state
//   fusetune_workers_registered                        gauge
//   fusetune_workers_alive                             gauge: heartbeat within the alive window
//   fusetune_trials_received_total                     counter: trials uploaded (incl. duplicates)
//   fusetune_trials_recorded_total                     counter: trials newly stored
//   fusetune_best_latency_seconds{device_class,problem}  gauge: best config's median
//   fusetune_best_speedup_vs_materialized{device_class,problem}  gauge: ratio (0 = unknown)
//   fusetune_best_max_rel_error{device_class,problem}  gauge
//   fusetune_best_run_id{device_class,problem}         gauge: the run that measured it
//   fusetune_best_series_dropped                       gauge: shapes not exported (label cap)
//   fusetune_regression_ratio{device_class,problem,config,metric,verdict}  gauge: the newest
//       verdict of each compared cell, its ratio new / baseline (verdict: regressed, improved,
//       same, unknown); the series of a cell is replaced when its verdict changes
//   fusetune_regressions_latest{verdict}               gauge: cells by their newest verdict
// Every RPC counter series (each method of the services times each gRPC code) and every
// method's latency histogram exists from start-up at 0: a rate() over a series that appears
// at 1 never sees its first increment, so an error ratio would miss the first errors.
// Labels are bounded: method and code are finite sets; the per-shape series exist once per
// stored best config (one per device class and problem, not per trial), capped at
// kMaxShapeSeries, and the regression series once per compared cell, capped the same way.
//
// Thread-safety: all methods are thread-safe.
#ifndef FUSETUNE_SERVICE_SERVER_METRICS_H_
#define FUSETUNE_SERVICE_SERVER_METRICS_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/metrics/metrics_endpoint.h"
#include "fusetune/db/store.h"
#include "fusetune/records/run.h"
#include "grpcpp/support/status_code_enum.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace fusetune {

inline constexpr size_t kMaxShapeSeries = 2000;

class ServiceMetrics {
 public:
  // Creates the series, the RPC ones for each of `rpc_methods` (e.g. "GetBestConfig"); when
  // `listen_address` is non-empty, also serves them on it ("127.0.0.1:0" picks a free port).
  // Errors are MetricsEndpoint::Start's: InvalidArgument for a malformed address,
  // Unavailable with the system's reason when it cannot listen there.
  static absl::StatusOr<std::unique_ptr<ServiceMetrics>> Create(const std::string& listen_address,
                                                                const std::vector<std::string>& rpc_methods);

  // Port /metrics is served on (0 when it is not served).
  int port() const { return endpoint_ ? endpoint_->port() : 0; }

  void ObserveRpc(const char* method, grpc::StatusCode code, double seconds);
  void AddTrials(int64_t received, int64_t recorded);
  void SetJobCounts(const std::vector<std::pair<std::string, int64_t>>& by_state);
  void SetWorkers(int64_t registered, int64_t alive);
  // Replaces the per-shape series with `best` (the first kMaxShapeSeries entries).
  void SetBestConfigs(const std::vector<BestConfig>& best);
  // Replaces the regression series with the newest verdict of each cell (device class,
  // problem, config, metric) among `newest_first` (Store::ListRegressions' order); the first
  // kMaxShapeSeries cells.
  void SetLatestVerdicts(const std::vector<Regression>& newest_first);

  // The text exposition of every series (what /metrics serves); for tests.
  std::string Serialize() const;

 private:
  ServiceMetrics() = default;

  // grpc::StatusCode's values are 0 (OK) .. 16 (UNAUTHENTICATED).
  static constexpr int kStatusCodes = static_cast<int>(grpc::StatusCode::UNAUTHENTICATED) + 1;
  struct RpcSeries {
    prometheus::Counter* by_code[kStatusCodes];  // indexed by grpc::StatusCode
    prometheus::Histogram* latency;
  };
  // The series of `method`, created on first use; requires mu_.
  RpcSeries& RpcSeriesOf(const std::string& method);

  std::shared_ptr<prometheus::Registry> registry_;

  prometheus::Family<prometheus::Counter>* rpc_requests_ = nullptr;
  prometheus::Family<prometheus::Histogram>* rpc_latency_ = nullptr;
  prometheus::Family<prometheus::Gauge>* jobs_ = nullptr;
  prometheus::Gauge* workers_registered_ = nullptr;
  prometheus::Gauge* workers_alive_ = nullptr;
  prometheus::Counter* trials_received_ = nullptr;
  prometheus::Counter* trials_recorded_ = nullptr;
  prometheus::Family<prometheus::Gauge>* best_latency_ = nullptr;
  prometheus::Family<prometheus::Gauge>* best_speedup_ = nullptr;
  prometheus::Family<prometheus::Gauge>* best_error_ = nullptr;
  prometheus::Family<prometheus::Gauge>* best_run_ = nullptr;
  prometheus::Gauge* best_dropped_ = nullptr;
  prometheus::Family<prometheus::Gauge>* regression_ratio_ = nullptr;
  prometheus::Family<prometheus::Gauge>* regressions_latest_ = nullptr;

  struct ShapeGauges {
    prometheus::Gauge* latency;
    prometheus::Gauge* speedup;
    prometheus::Gauge* error;
    prometheus::Gauge* run;
  };
  std::mutex mu_;  // guards the maps below (Family::Add is itself thread-safe)
  std::map<std::string, RpcSeries> rpc_;
  std::map<std::pair<std::string, std::string>, ShapeGauges> shapes_;
  // regression_ratio_'s current series by (device class, problem, config, metric, verdict).
  using VerdictSeriesKey = std::tuple<std::string, std::string, std::string, std::string, std::string>;
  std::map<VerdictSeriesKey, prometheus::Gauge*> verdict_series_;
  // Last member: destroyed first, so no scrape runs while the series are torn down.
  std::unique_ptr<MetricsEndpoint> endpoint_;
};

}  // namespace fusetune

#endif  // FUSETUNE_SERVICE_SERVER_METRICS_H_
