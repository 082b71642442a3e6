// The worker's Prometheus series, rendered from WorkerStats when /metrics is scraped (served
// by a MetricsEndpoint, service/metrics). Rendering from the stats the worker already keeps
// means there is one count of each thing, not a second set of counters to keep in step.
//
// Series (Prometheus base units; every counter exists from start-up at 0):
//   fusetune_worker_jobs_total{outcome}        counter: completed, failed (the job itself was
//                                              unrunnable), released (shutdown or device
//                                              failure), lost (lease taken back while running)
//   fusetune_worker_trials_total{stage}        counter: recorded (in the spool), uploaded
//                                              (acknowledged by the server), rejected (refused
//                                              as malformed by the server)
//   fusetune_worker_device_failures_total      counter: sweeps that failed or hung
//   fusetune_worker_devices                    gauge: devices this worker drives
//   fusetune_worker_device_info{worker_id,backend}  gauge 1: one series per driven device
//
// Thread-safety: a pure function.
#ifndef FUSETUNE_WORKER_WORKER_METRICS_H_
#define FUSETUNE_WORKER_WORKER_METRICS_H_

#include <string>
#include <string_view>
#include <vector>

#include "fusetune/worker/worker.h"

namespace fusetune {

// The text exposition (format 0.0.4) of the series above.
std::string RenderWorkerMetrics(const WorkerStats& stats, const std::vector<std::string>& device_worker_ids,
                                std::string_view backend);

}  // namespace fusetune

#endif  // FUSETUNE_WORKER_WORKER_METRICS_H_
