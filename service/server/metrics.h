// ServiceMetrics: the server's Prometheus series, exposed in the text format on /metrics by
// a prometheus-cpp Exposer. Internal to service/server.
//
// Series (every name is listed in dashboards/ and checked by dashboards_test):
//   fusetune_rpc_requests_total{method,code}          counter
//   fusetune_rpc_latency_seconds{method,code}         histogram
//   fusetune_jobs{state}                               gauge: queue depth by state
//   fusetune_workers_registered                        gauge
//   fusetune_workers_alive                             gauge: heartbeat within the alive window
//   fusetune_trials_received_total                     counter: trials uploaded (incl. duplicates)
//   fusetune_trials_recorded_total                     counter: trials newly stored
//   fusetune_best_latency_us{device_class,problem}     gauge: best config's median, µs
//   fusetune_best_speedup_vs_materialized{device_class,problem}  gauge: ratio (0 = unknown)
//   fusetune_best_max_rel_error{device_class,problem}  gauge
//   fusetune_best_run_id{device_class,problem}         gauge: the run that measured it
//   fusetune_best_series_dropped                       gauge: shapes not exported (label cap)
// Labels are bounded: method and code are finite sets; the per-shape series exist once per
// stored best config (one per device class and problem, not per trial), capped at
// kMaxShapeSeries.
//
// Thread-safety: all methods are thread-safe.
#ifndef FUSETUNE_SERVICE_SERVER_METRICS_H_
#define FUSETUNE_SERVICE_SERVER_METRICS_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/tuner/trial.h"
#include "grpcpp/support/status_code_enum.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace fusetune {

inline constexpr size_t kMaxShapeSeries = 2000;

class ServiceMetrics {
 public:
  // Creates the series; when `listen_address` is non-empty, also starts an Exposer on it
  // ("127.0.0.1:0" picks a free port). Unavailable with a clear message when the address
  // cannot be bound (prometheus-cpp throws; the exception never escapes).
  static absl::StatusOr<std::unique_ptr<ServiceMetrics>> Create(const std::string& listen_address);

  // Port the exposer listens on (0 when there is none).
  int port() const { return port_; }

  void ObserveRpc(const char* method, grpc::StatusCode code, double seconds);
  void AddTrials(int64_t received, int64_t recorded);
  void SetJobCounts(const std::vector<std::pair<std::string, int64_t>>& by_state);
  void SetWorkers(int64_t registered, int64_t alive);
  // Replaces the per-shape series with `best` (the first kMaxShapeSeries entries).
  void SetBestConfigs(const std::vector<BestConfig>& best);

  // The text exposition of every series (what /metrics serves); for tests.
  std::string Serialize() const;

 private:
  ServiceMetrics() = default;

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;

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

  struct ShapeGauges {
    prometheus::Gauge* latency;
    prometheus::Gauge* speedup;
    prometheus::Gauge* error;
    prometheus::Gauge* run;
  };
  std::mutex mu_;  // guards the maps below (Family::Add is itself thread-safe)
  std::map<std::pair<std::string, int>, std::pair<prometheus::Counter*, prometheus::Histogram*>> rpc_;
  std::map<std::pair<std::string, std::string>, ShapeGauges> shapes_;
};

}  // namespace fusetune

#endif  // FUSETUNE_SERVICE_SERVER_METRICS_H_
