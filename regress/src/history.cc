#include "fusetune/regress/history.h"

#include <algorithm>
#include <utility>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "fusetune/base/median.h"

namespace fusetune::regress {
namespace {

// Enough for years of nightly runs; ListBenchRuns' own ceiling.
constexpr int kMaxRuns = 100000;

}  // namespace

absl::StatusOr<CellSamples> CollectCellSamples(Store& store, const std::vector<RunInfo>& runs_oldest_first,
                                               const std::string& suite, const std::string& problem_key,
                                               const std::string& config_key) {
  CellSamples out;
  for (const RunInfo& run : runs_oldest_first) {
    absl::StatusOr<std::vector<BenchCell>> cells = store.ListBenchCells(run.run_id);
    if (!cells.ok()) return cells.status();
    CellSamples::Run samples{&run, {}};
    for (const BenchCell& c : *cells) {
      if (c.suite != suite) continue;
      out.known_cells.insert(c.problem_key + " " + c.config_key);
      if (c.problem_key != problem_key || (!config_key.empty() && c.config_key != config_key)) continue;
      if (c.outcome != TrialOutcome::kOk || c.blocks.empty()) continue;
      out.configs.insert(c.config_key);
      out.device_classes.insert(run.device.DeviceClass());
      const std::vector<double> blocks = c.SamplesUs();
      std::vector<double>& into = samples.blocks_by_config[c.config_key];
      into.insert(into.end(), blocks.begin(), blocks.end());
    }
    out.runs.push_back(std::move(samples));
  }
  return out;
}

absl::StatusOr<CellHistory> ReadHistory(Store& store, const HistoryQuery& q) {
  absl::StatusOr<std::vector<RunInfo>> runs = store.ListBenchRuns(q.suite, q.device_class, kMaxRuns);
  if (!runs.ok()) return runs.status();
  if (runs->empty()) {
    return absl::NotFoundError(fmt::format("no finished bench run of suite '{}'{}", q.suite,
                                           q.device_class.empty() ? "" : " on device class '" + q.device_class + "'"));
  }
  std::reverse(runs->begin(), runs->end());  // oldest first
  absl::StatusOr<CellSamples> samples = CollectCellSamples(store, *runs, q.suite, q.problem_key, q.config_key);
  if (!samples.ok()) return samples.status();
  if (samples->configs.empty()) {
    std::vector<std::string> listed(samples->known_cells.begin(), samples->known_cells.end());
    if (listed.size() > kCellsListed) listed.resize(kCellsListed);
    const std::string cell = q.config_key.empty() ? q.problem_key : q.problem_key + " " + q.config_key;
    return absl::InvalidArgumentError(fmt::format("suite '{}' has no measured cell '{}'; its cells ({} in all): {}",
                                                  q.suite, cell, samples->known_cells.size(), fmt::join(listed, "; ")));
  }
  if (samples->configs.size() > 1) {
    return absl::InvalidArgumentError(fmt::format("problem '{}' has several configs in suite '{}': {}; name one in "
                                                  "--cell 'PROBLEM_KEY CONFIG_KEY'",
                                                  q.problem_key, q.suite, fmt::join(samples->configs, ", ")));
  }
  if (samples->device_classes.size() > 1) {
    return absl::InvalidArgumentError(fmt::format("the cell was measured on several device classes: {}; choose one "
                                                  "with --device-class",
                                                  fmt::join(samples->device_classes, ", ")));
  }
  CellHistory history;
  history.problem_key = q.problem_key;
  history.config_key = *samples->configs.begin();
  history.device_class = *samples->device_classes.begin();
  for (CellSamples::Run& r : samples->runs) {
    auto it = r.blocks_by_config.find(history.config_key);
    if (it == r.blocks_by_config.end()) continue;
    history.points.push_back({r.run->run_id, r.run->commit, r.run->finished_unix_ms, Median(std::move(it->second))});
  }
  return history;
}

absl::StatusOr<ChangePointResult> DetectHistoryChangePoints(const CellHistory& history) {
  std::vector<SeriesPoint> series;
  for (const HistoryPoint& p : history.points) series.push_back({p.commit, p.median_us});
  return DetectChangePoints(series);
}

std::vector<ChangePointRow> ToRows(const CellHistory& h, const std::string& suite, const ChangePointResult& result) {
  std::vector<ChangePointRow> rows;
  for (const ChangePoint& cp : result.change_points) {
    ChangePointRow r;
    r.device_class = h.device_class;
    r.suite = suite;
    r.problem_key = h.problem_key;
    r.config_key = h.config_key;
    r.commit = cp.commit;
    r.position = cp.index;
    r.mean_before_us = cp.mean_before;
    r.mean_after_us = cp.mean_after;
    r.ratio = cp.mean_after / cp.mean_before;
    r.p_value = cp.p_value;
    r.direction = ChangeDirectionName(cp.direction);
    rows.push_back(std::move(r));
  }
  return rows;
}

absl::Status RecordChangePoints(Store& store, const CellHistory& history, const std::string& suite,
                                const ChangePointResult& result) {
  return store.ReplaceChangePoints(history.device_class, suite, history.problem_key, history.config_key,
                                   ToRows(history, suite, result));
}

}  // namespace fusetune::regress
