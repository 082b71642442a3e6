// ServiceMetrics: the server's Prometheus series, exposed in the text format on /metrics by
// a MetricsEndpoint (service/metrics). Internal to service/server.
//
// Series (every name is listed in dashboards/ and checked by dashboards_test; units are
// Prometheus base units: seconds, and points in time as Unix seconds; the names with a unit
// are constants of fusetune/service/metric_names.h):
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
// The bench history: the newest run of each of the last kBenchHistoryCommits commits per
// (device class, suite), one series per commit (the commit label), so that a dashboard shows
// the per-commit values side by side and names the commit of each:
//   fusetune_bench_run_position{device_class,suite,commit}  gauge: 0 = the newest commit's
//       run, 1 the one before, ...; `== 0` selects the newest run in a join
//   fusetune_bench_run_finished_timestamp_seconds{device_class,suite,commit}  gauge: Unix
//       seconds
//   fusetune_bench_latency_seconds{device_class,suite,problem,config,role,commit}  gauge: the
//       median of the cell's block medians, seconds (cells measured ok)
//   fusetune_bench_speedup_vs_materialized{device_class,suite,problem,commit}  gauge: the
//       problem's "materialized" cell over its "best" cell in the same run (both needed)
//   fusetune_bench_max_rel_error{device_class,suite,precision,commit}  gauge: the largest
//       relative error of the run's verified cells of that compute precision (fp32, tf32, ...)
//   fusetune_bench_series_dropped                      gauge: history series not exported (cap)
// Annotations (the value is the event's time, Unix seconds; a dashboard's "series value as
// timestamp" takes milliseconds, so its query multiplies by 1000):
//   fusetune_regression_detected_timestamp_seconds{device_class,problem,config,metric,commit,
//       baseline_commit}  gauge: when a "regressed" verdict was recorded; the newest
//       kMaxAnnotationSeries
//   fusetune_change_point_timestamp_seconds{device_class,suite,problem,config,commit,direction}
//       gauge: when the first run of the changed level finished; the newest
//       kMaxAnnotationSeries
// Every RPC counter series (each method of the services times each gRPC code) and every
// method's latency histogram exists from start-up at 0: a rate() over a series that appears
// at 1 never sees its first increment, so an error ratio would miss the first errors.
// Labels are bounded: method and code are finite sets; the per-shape series exist once per
// stored best config (one per device class and problem, not per trial), capped at
// kMaxShapeSeries, and the regression series once per compared cell, capped the same way.
// The history series exist per cell of each kept run: at most kBenchHistoryCommits runs per
// (device class, suite), and at most kMaxHistorySeries series per family in all.
//
// Thread-safety: all methods are thread-safe.
#ifndef FUSETUNE_SERVICE_SERVER_METRICS_H_
#define FUSETUNE_SERVICE_SERVER_METRICS_H_

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/metrics/metrics_endpoint.h"
#include "fusetune/records/bench_cell.h"
#include "fusetune/records/regression.h"
#include "fusetune/records/run.h"
#include "fusetune/service/server.h"
#include "grpcpp/support/status_code_enum.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace fusetune {

inline constexpr size_t kMaxShapeSeries = 2000;
// 50 commits: the window a change-point test looks at, and a readable bar chart.
inline constexpr int kBenchHistoryCommits = 50;
inline constexpr size_t kMaxHistorySeries = 20000;
inline constexpr size_t kMaxAnnotationSeries = 500;

// One kept bench run and its cells, as SetBenchHistory exports it.
struct BenchHistoryRun {
  std::string device_class;
  std::string suite;
  int position = 0;  // 0 = the newest kept run of (device class, suite), 1 the one before, ...
  RunInfo run;       // its commit labels the series
  std::vector<BenchCell> cells;
};

// The series of one gauge family that each refresh replaces as a whole: series are set in
// place and the ones a refresh did not set are removed after it, so that a scrape during a
// refresh never sees a kept series missing. Not thread-safe (ServiceMetrics locks around it).
class ReplacedGaugeSeries {
 public:
  ReplacedGaugeSeries(prometheus::Family<prometheus::Gauge>* family, size_t cap) : family_(family), cap_(cap) {}
  // Sets the series `labels` to `value`; false (nothing set) when `cap` other series were set
  // since the last RemoveUnset (so at most 2 * cap exist, for the length of one refresh).
  bool Set(const prometheus::Labels& labels, double value);
  // Whether `labels` was set since the last RemoveUnset.
  bool IsSet(const prometheus::Labels& labels) const { return set_.count(labels) != 0; }
  // Removes the series not set since the previous call.
  void RemoveUnset();

 private:
  prometheus::Family<prometheus::Gauge>* family_;
  size_t cap_;
  std::map<prometheus::Labels, prometheus::Gauge*> series_;
  std::set<prometheus::Labels> set_;
};

class ServiceMetrics {
 public:
  // Creates the series, the RPC ones for each of `rpc_methods` (e.g. "GetBestConfig"); when
  // `listen_address` is non-empty, also serves them on it ("127.0.0.1:0" picks a free port).
  // Errors are MetricsEndpoint::Start's: InvalidArgument for a malformed address,
  // Unavailable with the system's reason when it cannot listen there.
  // `pages`, when not null, answers /reports... on the same endpoint (report_pages.h).
  static absl::StatusOr<std::unique_ptr<ServiceMetrics>> Create(const std::string& listen_address,
                                                                const std::vector<std::string>& rpc_methods,
                                                                MetricsEndpoint::PageHandler pages = nullptr);

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
  // Replaces the bench history series with `runs` (the caller keeps one run per commit and
  // kBenchHistoryCommits per device class and suite: SelectBenchHistory).
  void SetBenchHistory(const std::vector<BenchHistoryRun>& runs);
  // Replaces fusetune_regression_detected_timestamp_seconds with the "regressed" rows among
  // `newest_first` (Store::ListRegressions' order), the first kMaxAnnotationSeries.
  void SetRegressionAnnotations(const std::vector<Regression>& newest_first);
  // Replaces fusetune_change_point_timestamp_seconds with `newest_first`, the first
  // kMaxAnnotationSeries; a mark without a time (unix_ms 0) takes the finish time of its
  // commit's run in `history` (what SetBenchHistory exported) and is left out when it has
  // none there.
  void SetChangePoints(const std::vector<ChangePointMark>& newest_first, const std::vector<BenchHistoryRun>& history);

  // Names this replica of the service: from then on every exported series carries the label
  // replica="<name>" (several `fusetune serve` over one database are told apart by it; the
  // series that read the shared database repeat on every replica). Empty: no such label.
  void SetReplica(std::string name);

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
  // Registers the families each refresh replaces as a whole (verdicts, bench history,
  // annotations) on `r`; in Create.
  void RegisterReplacedSeries(prometheus::Registry& r);
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
  prometheus::Family<prometheus::Gauge>* regressions_latest_ = nullptr;
  prometheus::Gauge* history_dropped_ = nullptr;

  struct ShapeGauges {
    prometheus::Gauge* latency;
    prometheus::Gauge* speedup;
    prometheus::Gauge* error;
    prometheus::Gauge* run;
  };
  mutable std::mutex replica_mu_;
  std::string replica_;  // guarded by replica_mu_
  std::mutex mu_;  // guards the maps below (Family::Add is itself thread-safe)
  std::map<std::string, RpcSeries> rpc_;
  std::map<std::pair<std::string, std::string>, ShapeGauges> shapes_;
  // Each refresh's series (ReplacedGaugeSeries are not thread-safe: used under mu_).
  std::unique_ptr<ReplacedGaugeSeries> verdict_ratio_;
  std::unique_ptr<ReplacedGaugeSeries> run_position_, run_finished_, bench_latency_, bench_speedup_, bench_error_;
  std::unique_ptr<ReplacedGaugeSeries> regression_marks_, change_point_marks_;
  // Last member: destroyed first, so no scrape runs while the series are torn down.
  std::unique_ptr<MetricsEndpoint> endpoint_;
};

}  // namespace fusetune

#endif  // FUSETUNE_SERVICE_SERVER_METRICS_H_
