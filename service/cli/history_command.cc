// fusetune history: one cell's per-commit history from a suite's bench runs (per run, the
// median of the cell's block medians, ordered by the run's finish time), its change points
// (E-divisive means with a t-test, ci/include/fusetune/regress/change_points.h), optionally
// recorded in the store and drawn as an SVG chart.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "commands.h"
#include "fmt/format.h"
#include "fusetune/base/time.h"
#include "fusetune/db/store.h"
#include "fusetune/regress/change_points.h"
#include "fusetune/regress/stats.h"
#include "history_plot.h"
#include "nlohmann/json.hpp"
#include "problem_flags.h"
#include "text_table.h"

namespace fusetune::cli {
namespace {

// Enough for years of nightly runs; ListBenchRuns' own ceiling.
constexpr int kMaxRuns = 100000;
// How many of the existing cells an unknown --cell lists.
constexpr size_t kCellsListed = 20;

struct HistoryFlags {
  std::string db = "./fusetune.db";
  std::string suite;
  std::string cell;
  std::string device_class;
  std::string plot;
  bool json = false;
  bool record = false;
};

struct HistoryPoint {
  int64_t run_id = 0;
  std::string commit;
  int64_t finished_unix_ms = 0;
  double median_us = 0;
};

struct CellHistory {
  std::string device_class;
  std::string problem_key;
  std::string config_key;
  std::vector<HistoryPoint> points;  // oldest first
};

std::string UtcMinute(int64_t unix_ms) { return FormatUtc(unix_ms, "%Y-%m-%d %H:%M"); }

// What the suite's runs hold for the asked-for cell, oldest run first.
struct CellSamples {
  struct Run {
    const RunInfo* run = nullptr;
    std::map<std::string, std::vector<double>> blocks_by_config;  // the matching cells' block medians
  };
  std::vector<Run> runs;
  std::set<std::string> known_cells;     // every "problem config" of the suite
  std::set<std::string> configs;         // the configs that match the asked-for cell
  std::set<std::string> device_classes;  // of the runs holding a matching cell
};

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

// kExitUsage (after printing why) unless the samples name exactly one config on one device
// class; kExitOk otherwise.
int CheckOneCell(const HistoryFlags& f, const std::string& problem_key, const CellSamples& samples) {
  const std::string cmd = "history";
  if (samples.configs.empty()) {
    std::vector<std::string> listed(samples.known_cells.begin(), samples.known_cells.end());
    if (listed.size() > kCellsListed) listed.resize(kCellsListed);
    return UsageError(cmd, fmt::format("suite '{}' has no measured cell '{}'; its cells ({} in all): {}", f.suite,
                                       f.cell, samples.known_cells.size(), fmt::join(listed, "; ")));
  }
  if (samples.configs.size() > 1) {
    return UsageError(cmd, fmt::format("problem '{}' has several configs in suite '{}': {}; name one in "
                                       "--cell 'PROBLEM_KEY CONFIG_KEY'",
                                       problem_key, f.suite, fmt::join(samples.configs, ", ")));
  }
  if (samples.device_classes.size() > 1) {
    return UsageError(cmd, fmt::format("the cell was measured on several device classes: {}; choose one "
                                       "with --device-class",
                                       fmt::join(samples.device_classes, ", ")));
  }
  return kExitOk;
}

// Reads the cell's history. Sets *exit_code and returns nullopt (after printing why) when
// there are no bench runs (kExitNotFound), the cell is unknown or ambiguous, or the runs
// span several device classes without --device-class (kExitUsage), or the store fails.
std::optional<CellHistory> ReadHistory(Store& store, const HistoryFlags& f, const std::string& problem_key,
                                       const std::string& config_key, int* exit_code) {
  const std::string cmd = "history";
  absl::StatusOr<std::vector<RunInfo>> runs = store.ListBenchRuns(f.suite, f.device_class, kMaxRuns);
  if (!runs.ok()) {
    *exit_code = Failure(cmd, std::string(runs.status().message()));
    return std::nullopt;
  }
  if (runs->empty()) {
    std::fprintf(stderr, "fusetune history: no finished bench run of suite '%s'%s in %s\n", f.suite.c_str(),
                 f.device_class.empty() ? "" : (" on device class '" + f.device_class + "'").c_str(), f.db.c_str());
    *exit_code = kExitNotFound;
    return std::nullopt;
  }
  std::reverse(runs->begin(), runs->end());  // oldest first
  absl::StatusOr<CellSamples> samples = CollectCellSamples(store, *runs, f.suite, problem_key, config_key);
  if (!samples.ok()) {
    *exit_code = Failure(cmd, std::string(samples.status().message()));
    return std::nullopt;
  }
  *exit_code = CheckOneCell(f, problem_key, *samples);
  if (*exit_code != kExitOk) return std::nullopt;
  CellHistory history;
  history.problem_key = problem_key;
  history.config_key = *samples->configs.begin();
  history.device_class = *samples->device_classes.begin();
  for (CellSamples::Run& r : samples->runs) {
    auto it = r.blocks_by_config.find(history.config_key);
    if (it == r.blocks_by_config.end()) continue;
    history.points.push_back({r.run->run_id, r.run->commit, r.run->finished_unix_ms,
                              Median(std::move(it->second))});
  }
  return history;
}

std::vector<ChangePointRow> ToRows(const CellHistory& h, const std::string& suite,
                                   const regress::ChangePointResult& result) {
  std::vector<ChangePointRow> rows;
  for (const regress::ChangePoint& cp : result.change_points) {
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
    r.direction = regress::ChangeDirectionName(cp.direction);
    rows.push_back(std::move(r));
  }
  return rows;
}

nlohmann::json HistoryJson(const CellHistory& h, const std::string& suite, const regress::ChangePointResult& result) {
  nlohmann::json series = nlohmann::json::array();
  for (const HistoryPoint& p : h.points) {
    series.push_back({{"run_id", p.run_id}, {"commit", p.commit}, {"finished_unix_ms", p.finished_unix_ms},
                      {"median_us", p.median_us}});
  }
  nlohmann::json changes = nlohmann::json::array();
  for (const regress::ChangePoint& cp : result.change_points) {
    changes.push_back({{"index", cp.index},
                       {"commit", cp.commit},
                       {"mean_before_us", cp.mean_before},
                       {"mean_after_us", cp.mean_after},
                       {"relative_change", cp.relative_change},
                       {"p_value", cp.p_value},
                       {"direction", regress::ChangeDirectionName(cp.direction)}});
  }
  return {{"suite", suite},
          {"device_class", h.device_class},
          {"problem_key", h.problem_key},
          {"config_key", h.config_key},
          {"series", series},
          {"change_points", changes},
          {"cumulative_change", result.cumulative_change}};
}

void PrintHistory(const CellHistory& h, const std::string& suite, const regress::ChangePointResult& result) {
  std::printf("suite %s, device class %s\ncell %s %s\n\n", suite.c_str(), h.device_class.c_str(),
              h.problem_key.c_str(), h.config_key.c_str());
  std::map<int, const regress::ChangePoint*> at;
  for (const regress::ChangePoint& cp : result.change_points) at[cp.index] = &cp;
  TextTable table({{"#", TextAlign::kRight},
                   {"COMMIT"},
                   {"FINISHED (UTC)"},
                   {"MEDIAN_US", TextAlign::kRight},
                   {"CHANGE"}});
  for (size_t i = 0; i < h.points.size(); ++i) {
    const HistoryPoint& p = h.points[i];
    auto it = at.find(static_cast<int>(i));
    const std::string marker =
        it == at.end() ? ""
                       : fmt::format("<- {} {:+.2f} %", regress::ChangeDirectionName(it->second->direction),
                                     100 * it->second->relative_change);
    table.AddRow({std::to_string(i), p.commit, UtcMinute(p.finished_unix_ms),
                  fmt::format("{:.3f}", p.median_us), marker});
  }
  table.Print();
  std::printf("\n%zu change point(s)\n", result.change_points.size());
  for (const regress::ChangePoint& cp : result.change_points) {
    std::printf("  at #%d commit %s: %s %+.2f %% (%.3f -> %.3f us), p = %.2g\n", cp.index, cp.commit.c_str(),
                regress::ChangeDirectionName(cp.direction), 100 * cp.relative_change, cp.mean_before,
                cp.mean_after, cp.p_value);
    // Nightlies can be several commits apart: the commit between the two runs is found by bisect.
    if (cp.index > 0) {
      std::printf("    find the commit: fusetune bisect --good %s --bad %s --cell '%s %s'%s\n",
                  h.points[cp.index - 1].commit.c_str(), cp.commit.c_str(), h.problem_key.c_str(),
                  h.config_key.c_str(), cp.direction == regress::ChangeDirection::kFaster ? " --improvement" : "");
    }
  }
  if (!result.change_points.empty()) {
    std::printf("cumulative change, first segment to last: %+.2f %%\n", 100 * result.cumulative_change);
  }
}

int RunHistory(const HistoryFlags& f) {
  const std::string cmd = "history";
  if (f.suite.empty()) return UsageError(cmd, "--suite must not be empty");
  const size_t space = f.cell.find(' ');
  const std::string problem_key = f.cell.substr(0, space);
  const std::string config_key = space == std::string::npos ? "" : f.cell.substr(space + 1);
  if (problem_key.empty() || (space != std::string::npos && config_key.empty()) ||
      config_key.find(' ') != std::string::npos) {
    return UsageError(cmd, "--cell must be 'PROBLEM_KEY' or 'PROBLEM_KEY CONFIG_KEY', got '" + f.cell + "'");
  }
  absl::StatusOr<std::unique_ptr<Store>> store = f.record ? OpenExistingStoreForWriting(f.db) : OpenExistingStore(f.db);
  if (!store.ok()) return Failure(cmd, std::string(store.status().message()));
  int exit_code = kExitOk;
  std::optional<CellHistory> history = ReadHistory(**store, f, problem_key, config_key, &exit_code);
  if (!history.has_value()) return exit_code;
  std::vector<regress::SeriesPoint> series;
  for (const HistoryPoint& p : history->points) series.push_back({p.commit, p.median_us});
  absl::StatusOr<regress::ChangePointResult> result = regress::DetectChangePoints(series);
  if (!result.ok()) return Failure(cmd, std::string(result.status().message()));
  if (f.record) {
    absl::Status s = (*store)->ReplaceChangePoints(history->device_class, f.suite, history->problem_key,
                                                   history->config_key, ToRows(*history, f.suite, *result));
    if (!s.ok()) return Failure(cmd, std::string(s.message()));
  }
  if (!f.plot.empty()) {
    std::vector<HistoryPlotPoint> points;
    std::vector<HistoryPlotChange> changes;
    for (const HistoryPoint& p : history->points) points.push_back({p.commit, p.median_us});
    for (const regress::ChangePoint& cp : result->change_points) {
      changes.push_back({cp.index, cp.commit, cp.relative_change});
    }
    std::ofstream out(f.plot, std::ios::binary | std::ios::trunc);
    out << HistorySvg(fmt::format("{} {} ({})", history->problem_key, history->config_key, f.suite), points,
                      changes);
    out.close();
    if (!out) return Failure(cmd, "cannot write the plot to " + f.plot);
  }
  if (f.json) {
    std::printf("%s\n", HistoryJson(*history, f.suite, *result).dump(2).c_str());
  } else {
    PrintHistory(*history, f.suite, *result);
  }
  return kExitOk;
}

}  // namespace

void AddHistoryCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<HistoryFlags>();
  CLI::App* history = app.add_subcommand(
      "history", "One cell's per-commit history from a suite's bench runs (median of its block medians per run, "
                 "oldest first) with its change points (E-divisive means, t-test p <= 0.001).");
  AddDatabaseOption(history, &flags->db, "SQLite database with the bench runs");
  history->add_option("--suite", flags->suite, "the suite's name")->required();
  history->add_option("--cell", flags->cell, "'PROBLEM_KEY' or 'PROBLEM_KEY CONFIG_KEY'")->required();
  history->add_option("--device-class", flags->device_class, "only runs on this device class");
  history->add_option("--plot", flags->plot, "write an SVG line chart with the change points to this file");
  history->add_flag("--record", flags->record, "store the change points (replacing the cell's earlier ones)");
  history->add_flag("--json", flags->json, "print JSON");
  SetAction(history, context, [flags] { return RunHistory(*flags); });
}

}  // namespace fusetune::cli
