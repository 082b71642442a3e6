#include "metrics.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "fusetune/kernels/config.h"
#include "fusetune/base/median.h"
#include "fusetune/service/metric_names.h"
#include "fusetune/wire/status.h"
#include "prometheus/text_serializer.h"

namespace fusetune {
namespace {

// 50 µs .. ~13 s in factors of 2: loopback lookups sit at the bottom, long-polls at the top.
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double v = 50e-6; v < 15.0; v *= 2) b.push_back(v);
  b.push_back(30.0);
  return b;
}

// Prometheus base units: the records hold microseconds and Unix milliseconds, the series
// seconds and Unix seconds. Division rounds once, so 12.5 µs is exported as 1.25e-05.
double SecondsFromUs(double us) { return us / 1e6; }
double UnixSecondsFromUnixMs(int64_t unix_ms) { return static_cast<double>(unix_ms) / 1e3; }

prometheus::Family<prometheus::Gauge>& Gauges(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}

}  // namespace

bool ReplacedGaugeSeries::Set(const prometheus::Labels& labels, double value) {
  // The cap counts this refresh's series, not the previous one's still awaiting removal: a
  // full set of old series never crowds out the newest.
  if (set_.size() >= cap_ && set_.count(labels) == 0) return false;
  auto it = series_.find(labels);
  if (it == series_.end()) it = series_.emplace(labels, &family_->Add(labels)).first;
  it->second->Set(value);
  set_.insert(labels);
  return true;
}

void ReplacedGaugeSeries::RemoveUnset() {
  for (auto it = series_.begin(); it != series_.end();) {
    if (set_.count(it->first) == 0) {
      family_->Remove(it->second);
      it = series_.erase(it);
    } else {
      ++it;
    }
  }
  set_.clear();
}

absl::StatusOr<std::unique_ptr<ServiceMetrics>> ServiceMetrics::Create(const std::string& listen_address,
                                                                      const std::vector<std::string>& rpc_methods,
                                                                       MetricsEndpoint::PageHandler pages) {
  std::unique_ptr<ServiceMetrics> m(new ServiceMetrics());
  m->registry_ = std::make_shared<prometheus::Registry>();
  auto& r = *m->registry_;
  m->rpc_requests_ = &prometheus::BuildCounter()
                          .Name("fusetune_rpc_requests_total")
                          .Help("RPCs handled, by method and gRPC status code")
                          .Register(r);
  m->rpc_latency_ = &prometheus::BuildHistogram()
                         .Name("fusetune_rpc_latency_seconds")
                         .Help("RPC handling time in seconds, by method")
                         .Register(r);
  m->jobs_ = &prometheus::BuildGauge().Name("fusetune_jobs").Help("Tuning jobs by state").Register(r);
  auto& workers = prometheus::BuildGauge()
                      .Name("fusetune_workers_registered")
                      .Help("Workers ever registered")
                      .Register(r);
  m->workers_registered_ = &workers.Add({});
  auto& alive = prometheus::BuildGauge()
                    .Name("fusetune_workers_alive")
                    .Help("Workers whose last heartbeat is within the alive window")
                    .Register(r);
  m->workers_alive_ = &alive.Add({});
  m->trials_received_ = &prometheus::BuildCounter()
                             .Name("fusetune_trials_received_total")
                             .Help("Trials uploaded through ReportTrials, duplicates included")
                             .Register(r)
                             .Add({});
  m->trials_recorded_ = &prometheus::BuildCounter()
                             .Name("fusetune_trials_recorded_total")
                             .Help("Trials newly stored through ReportTrials")
                             .Register(r)
                             .Add({});
  m->best_latency_ = &prometheus::BuildGauge()
                          .Name(kBestLatencySeconds)
                          .Help("Median latency of the best config, seconds")
                          .Register(r);
  m->best_speedup_ = &prometheus::BuildGauge()
                          .Name("fusetune_best_speedup_vs_materialized")
                          .Help("Best fused over best materialized latency ratio (0 = unknown)")
                          .Register(r);
  m->best_error_ = &prometheus::BuildGauge()
                        .Name("fusetune_best_max_rel_error")
                        .Help("Max relative error of the best config against the fp64 reference")
                        .Register(r);
  m->best_run_ = &prometheus::BuildGauge()
                      .Name("fusetune_best_run_id")
                      .Help("Run that measured the best config")
                      .Register(r);
  m->regressions_latest_ = &prometheus::BuildGauge()
                                .Name("fusetune_regressions_latest")
                                .Help("Compared cells by their newest verdict")
                                .Register(r);
  for (std::string_view verdict : kRegressionVerdicts) m->regressions_latest_->Add({{"verdict", std::string(verdict)}}).Set(0);
  m->best_dropped_ = &prometheus::BuildGauge()
                          .Name("fusetune_best_series_dropped")
                          .Help("Best configs not exported because of the per-shape series cap")
                          .Register(r)
                          .Add({});
  m->RegisterReplacedSeries(r);
  {
    std::lock_guard<std::mutex> lock(m->mu_);
    for (const std::string& method : rpc_methods) m->RpcSeriesOf(method);
  }
  if (!listen_address.empty()) {
    const ServiceMetrics* self = m.get();
    auto endpoint = MetricsEndpoint::Start(listen_address, [self] { return self->Serialize(); }, std::move(pages));
    if (!endpoint.ok()) return endpoint.status();
    m->endpoint_ = std::move(*endpoint);
  }
  return m;
}

void ServiceMetrics::RegisterReplacedSeries(prometheus::Registry& r) {
  auto replaced = [&](const char* name, const char* help, size_t cap) {
    return std::make_unique<ReplacedGaugeSeries>(&Gauges(r, name, help), cap);
  };
  verdict_ratio_ = replaced("fusetune_regression_ratio",
                            "Newest regression verdict per compared cell: its ratio new / baseline", kMaxShapeSeries);
  run_position_ = replaced("fusetune_bench_run_position",
                           "Kept bench runs per device class and suite: 0 = the newest commit's run", kMaxHistorySeries);
  run_finished_ = replaced(kBenchRunFinishedTimestampSeconds, "When a kept bench run finished, Unix seconds",
                           kMaxHistorySeries);
  bench_latency_ = replaced(kBenchLatencySeconds, "Median of a bench cell's block medians in a kept run, seconds",
                            kMaxHistorySeries);
  bench_speedup_ = replaced("fusetune_bench_speedup_vs_materialized",
                            "A problem's materialized over best latency in a kept bench run", kMaxHistorySeries);
  bench_error_ = replaced("fusetune_bench_max_rel_error",
                          "Largest relative error of a kept bench run's verified cells per compute precision",
                          kMaxHistorySeries);
  regression_marks_ = replaced(kRegressionDetectedTimestampSeconds,
                               "When a regressed verdict was recorded, Unix seconds (an annotation)",
                               kMaxAnnotationSeries);
  change_point_marks_ = replaced(kChangePointTimestampSeconds,
                                 "When the first bench run after a change point finished, Unix seconds (an annotation)",
                                 kMaxAnnotationSeries);
  history_dropped_ =
      &Gauges(r, "fusetune_bench_series_dropped", "Bench history series not exported because of the series cap").Add({});
}

ServiceMetrics::RpcSeries& ServiceMetrics::RpcSeriesOf(const std::string& method) {
  auto it = rpc_.find(method);
  if (it != rpc_.end()) return it->second;
  RpcSeries series{};
  for (int code = 0; code < kStatusCodes; ++code) {
    series.by_code[code] =
        &rpc_requests_->Add({{"method", method}, {"code", StatusCodeName(static_cast<grpc::StatusCode>(code))}});
  }
  series.latency = &rpc_latency_->Add({{"method", method}}, LatencyBuckets());
  return rpc_.emplace(method, series).first->second;
}

void ServiceMetrics::ObserveRpc(const char* method, grpc::StatusCode code, double seconds) {
  prometheus::Counter* counter;
  prometheus::Histogram* latency;
  {
    std::lock_guard<std::mutex> lock(mu_);
    RpcSeries& series = RpcSeriesOf(method);
    const int index = static_cast<int>(code);
    counter = series.by_code[index >= 0 && index < kStatusCodes ? index : static_cast<int>(grpc::StatusCode::UNKNOWN)];
    latency = series.latency;
  }
  counter->Increment();
  latency->Observe(seconds);
}

void ServiceMetrics::AddTrials(int64_t received, int64_t recorded) {
  trials_received_->Increment(static_cast<double>(received));
  trials_recorded_->Increment(static_cast<double>(recorded));
}

void ServiceMetrics::SetJobCounts(const std::vector<std::pair<std::string, int64_t>>& by_state) {
  // Every state is exported, zero included, so that dashboards show an empty queue as 0.
  std::map<std::string, int64_t> counts{{"queued", 0}, {"leased", 0}, {"done", 0}, {"failed", 0}};
  for (const auto& [state, n] : by_state) counts[state] = n;
  for (const auto& [state, n] : counts) jobs_->Add({{"state", state}}).Set(static_cast<double>(n));
}

void ServiceMetrics::SetWorkers(int64_t registered, int64_t alive) {
  workers_registered_->Set(static_cast<double>(registered));
  workers_alive_->Set(static_cast<double>(alive));
}

void ServiceMetrics::SetBestConfigs(const std::vector<BestConfig>& best) {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::pair<std::string, std::string>> seen;
  size_t dropped = 0;
  for (const BestConfig& b : best) {
    auto key = std::make_pair(b.device_class, b.problem_key);
    auto it = shapes_.find(key);
    if (it == shapes_.end()) {
      if (shapes_.size() >= kMaxShapeSeries) {
        ++dropped;
        continue;
      }
      prometheus::Labels labels{{"device_class", b.device_class}, {"problem", b.problem_key}};
      it = shapes_.emplace(key, ShapeGauges{&best_latency_->Add(labels), &best_speedup_->Add(labels),
                                            &best_error_->Add(labels), &best_run_->Add(labels)})
               .first;
    }
    seen.insert(key);
    it->second.latency->Set(SecondsFromUs(b.median_us));
    it->second.speedup->Set(b.speedup_vs_materialized);
    it->second.error->Set(b.max_rel_error);
    it->second.run->Set(static_cast<double>(b.run_id));
  }
  for (auto it = shapes_.begin(); it != shapes_.end();) {
    if (seen.count(it->first) == 0) {
      best_latency_->Remove(it->second.latency);
      best_speedup_->Remove(it->second.speedup);
      best_error_->Remove(it->second.error);
      best_run_->Remove(it->second.run);
      it = shapes_.erase(it);
    } else {
      ++it;
    }
  }
  best_dropped_->Set(static_cast<double>(dropped));
}

void ServiceMetrics::SetLatestVerdicts(const std::vector<Regression>& newest_first) {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::tuple<std::string, std::string, std::string, std::string>> cells;
  std::map<std::string, int64_t> by_verdict;
  for (const Regression& r : newest_first) {
    if (!cells.emplace(r.device_class, r.problem_key, r.config_key, r.metric).second) continue;  // older
    ++by_verdict[r.verdict];
    verdict_ratio_->Set({{"device_class", r.device_class},
                         {"problem", r.problem_key},
                         {"config", r.config_key},
                         {"metric", r.metric},
                         {"verdict", r.verdict}},
                        r.ratio);
  }
  verdict_ratio_->RemoveUnset();
  for (std::string_view verdict : kRegressionVerdicts) {
    regressions_latest_->Add({{"verdict", std::string(verdict)}}).Set(static_cast<double>(by_verdict[std::string(verdict)]));
  }
}

void ServiceMetrics::SetBenchHistory(const std::vector<BenchHistoryRun>& runs) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t dropped = 0;
  auto set = [&](ReplacedGaugeSeries& series, const prometheus::Labels& labels, double value) {
    if (!series.Set(labels, value)) ++dropped;
  };
  for (const BenchHistoryRun& h : runs) {
    const prometheus::Labels run_labels{{"device_class", h.device_class}, {"suite", h.suite}, {"commit", h.run.commit}};
    set(*run_position_, run_labels, h.position);
    set(*run_finished_, run_labels, UnixSecondsFromUnixMs(h.run.finished_unix_ms));
    std::map<std::string, std::pair<double, double>> best_and_materialized;  // by problem; 0 = none
    std::map<std::string, double> error_by_precision;
    for (const BenchCell& cell : h.cells) {
      const std::vector<double> samples = cell.SamplesUs();
      if (cell.outcome != TrialOutcome::kOk || samples.empty()) continue;
      const double median = Median(samples);
      prometheus::Labels labels = run_labels;
      labels.insert({{"problem", cell.problem_key}, {"config", cell.config_key}, {"role", cell.role}});
      set(*bench_latency_, labels, SecondsFromUs(median));
      auto& [best, materialized] = best_and_materialized[cell.problem_key];
      if (cell.role == "best") best = best == 0 ? median : std::min(best, median);
      if (cell.role == "materialized") materialized = materialized == 0 ? median : std::min(materialized, median);
      if (auto config = KernelConfig::FromKey(cell.config_key); config.ok() && cell.tolerance > 0) {
        double& error = error_by_precision[std::string(PrecisionName(config->precision))];
        error = std::max(error, cell.max_rel_error);
      }
    }
    for (const auto& [problem, latencies] : best_and_materialized) {
      if (latencies.first <= 0 || latencies.second <= 0) continue;
      prometheus::Labels labels = run_labels;
      labels.emplace("problem", problem);
      set(*bench_speedup_, labels, latencies.second / latencies.first);
    }
    for (const auto& [precision, error] : error_by_precision) {
      prometheus::Labels labels = run_labels;
      labels.emplace("precision", precision);
      set(*bench_error_, labels, error);
    }
  }
  for (ReplacedGaugeSeries* series : {run_position_.get(), run_finished_.get(), bench_latency_.get(),
                                      bench_speedup_.get(), bench_error_.get()}) {
    series->RemoveUnset();
  }
  history_dropped_->Set(static_cast<double>(dropped));
}

void ServiceMetrics::SetRegressionAnnotations(const std::vector<Regression>& newest_first) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Regression& r : newest_first) {
    if (r.verdict != "regressed") continue;
    const prometheus::Labels labels{{"device_class", r.device_class}, {"problem", r.problem_key},
                                    {"config", r.config_key}, {"metric", r.metric},
                                    {"commit", r.commit}, {"baseline_commit", r.baseline_commit}};
    // A re-checked commit keeps the time of its newest verdict.
    if (!regression_marks_->IsSet(labels)) regression_marks_->Set(labels, UnixSecondsFromUnixMs(r.created_unix_ms));
  }
  regression_marks_->RemoveUnset();
}

void ServiceMetrics::SetChangePoints(const std::vector<ChangePointMark>& newest_first,
                                     const std::vector<BenchHistoryRun>& history) {
  std::map<std::tuple<std::string, std::string, std::string>, int64_t> finished;  // (class, suite, commit)
  for (const BenchHistoryRun& h : history) finished[{h.device_class, h.suite, h.run.commit}] = h.run.finished_unix_ms;
  std::lock_guard<std::mutex> lock(mu_);
  for (const ChangePointMark& c : newest_first) {
    int64_t unix_ms = c.unix_ms;
    if (unix_ms == 0) {
      auto it = finished.find({c.device_class, c.suite, c.commit});
      if (it == finished.end()) continue;
      unix_ms = it->second;
    }
    const prometheus::Labels labels{{"device_class", c.device_class}, {"suite", c.suite},
                                    {"problem", c.problem_key}, {"config", c.config_key},
                                    {"commit", c.commit}, {"direction", c.direction}};
    if (!change_point_marks_->IsSet(labels)) change_point_marks_->Set(labels, UnixSecondsFromUnixMs(unix_ms));
  }
  change_point_marks_->RemoveUnset();
}

void ServiceMetrics::SetReplica(std::string name) {
  std::lock_guard<std::mutex> lock(replica_mu_);
  replica_ = std::move(name);
}

std::string ServiceMetrics::Serialize() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  std::string replica;
  {
    std::lock_guard<std::mutex> lock(replica_mu_);
    replica = replica_;
  }
  // One label added at serialization reaches every series, those created later included.
  if (!replica.empty()) {
    for (prometheus::MetricFamily& family : families) {
      for (prometheus::ClientMetric& metric : family.metric) metric.label.push_back({"replica", replica});
    }
  }
  prometheus::TextSerializer serializer;
  return serializer.Serialize(families);
}

}  // namespace fusetune
