#include "fusetune/worker/worker_metrics.h"

#include <cstdint>
#include <utility>

#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"

namespace fusetune {
namespace {

prometheus::MetricFamily Family(std::string name, std::string help, prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

void AddCounter(prometheus::MetricFamily& f, std::vector<prometheus::ClientMetric::Label> labels, int64_t value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.counter.value = static_cast<double>(value);
  f.metric.push_back(std::move(m));
}

void AddGauge(prometheus::MetricFamily& f, std::vector<prometheus::ClientMetric::Label> labels, double value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  f.metric.push_back(std::move(m));
}

}  // namespace

std::string RenderWorkerMetrics(const WorkerStats& stats, const std::vector<std::string>& device_worker_ids,
                                std::string_view backend) {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> families;

  auto jobs = Family("fusetune_worker_jobs_total", "Jobs this worker finished, by outcome", MetricType::Counter);
  AddCounter(jobs, {{"outcome", "completed"}}, stats.jobs_completed);
  AddCounter(jobs, {{"outcome", "failed"}}, stats.jobs_failed);
  AddCounter(jobs, {{"outcome", "released"}}, stats.jobs_released);
  AddCounter(jobs, {{"outcome", "lost"}}, stats.jobs_lost);
  families.push_back(std::move(jobs));

  auto trials = Family("fusetune_worker_trials_total", "Trials by stage: recorded in the spool, uploaded, rejected",
                       MetricType::Counter);
  AddCounter(trials, {{"stage", "recorded"}}, stats.trials_recorded);
  AddCounter(trials, {{"stage", "uploaded"}}, stats.trials_uploaded);
  AddCounter(trials, {{"stage", "rejected"}}, stats.trials_rejected);
  families.push_back(std::move(trials));

  auto failures = Family("fusetune_worker_device_failures_total", "Sweeps that failed or hung on a device",
                         MetricType::Counter);
  AddCounter(failures, {}, stats.device_failures);
  families.push_back(std::move(failures));

  auto devices = Family("fusetune_worker_devices", "Devices this worker drives", MetricType::Gauge);
  AddGauge(devices, {}, static_cast<double>(stats.devices));
  families.push_back(std::move(devices));

  auto info = Family("fusetune_worker_device_info", "One series per driven device (value 1)", MetricType::Gauge);
  for (const std::string& id : device_worker_ids) {
    AddGauge(info, {{"backend", std::string(backend)}, {"worker_id", id}}, 1.0);
  }
  families.push_back(std::move(info));

  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace fusetune
