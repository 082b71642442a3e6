// Names of the server's Prometheus series whose values carry a unit. Prometheus names a
// unit in the series name and uses base units: durations in seconds (`_seconds`), points in
// time as Unix seconds (`_timestamp_seconds`). The exporter (service/server/metrics.cc), its
// tests and the dashboard's query test refer to these series by the constants below; every
// series with its labels is listed in service/server/metrics.h and dashboards/README.md.
//
// Thread-safety: constants only.
#ifndef FUSETUNE_SERVICE_METRIC_NAMES_H_
#define FUSETUNE_SERVICE_METRIC_NAMES_H_

namespace fusetune {

// The stored best config's median latency, seconds.
inline constexpr char kBestLatencySeconds[] = "fusetune_best_latency_seconds";
// A kept bench run's cell: the median of its block medians, seconds.
inline constexpr char kBenchLatencySeconds[] = "fusetune_bench_latency_seconds";
// When a kept bench run finished, Unix seconds.
inline constexpr char kBenchRunFinishedTimestampSeconds[] = "fusetune_bench_run_finished_timestamp_seconds";
// Annotations: when a "regressed" verdict was recorded, and when the first bench run after a
// change point finished, Unix seconds.
inline constexpr char kRegressionDetectedTimestampSeconds[] = "fusetune_regression_detected_timestamp_seconds";
inline constexpr char kChangePointTimestampSeconds[] = "fusetune_change_point_timestamp_seconds";

}  // namespace fusetune

#endif  // FUSETUNE_SERVICE_METRIC_NAMES_H_
