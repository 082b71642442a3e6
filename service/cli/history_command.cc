// fusetune history: one cell's per-commit history from a suite's bench runs (per run, the
// median of the cell's block medians, ordered by the run's finish time), its change points
// (E-divisive means with a t-test, regress/include/fusetune/regress/change_points.h), optionally
// recorded in the store and drawn as an SVG chart.
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "fmt/format.h"
#include "fusetune/base/time.h"
#include "fusetune/db/store.h"
#include "fusetune/regress/change_points.h"
#include "fusetune/regress/history.h"
#include "fusetune/report/history_plot.h"
#include "fusetune/report/history_report.h"
#include "fusetune/report/html.h"
#include "nlohmann/json.hpp"
#include "problem_flags.h"
#include "text_table.h"

namespace fusetune::cli {
namespace {

struct HistoryFlags {
  std::string db = "./fusetune.db";
  std::string suite;
  std::string cell;
  std::string device_class;
  std::string plot;
  std::string html;               // the HTML report of the cell, or of every cell without --cell
  std::string html_regress_link;  // the regress page its cells link to
  bool json = false;
  bool record = false;
};

std::string UtcMinute(int64_t unix_ms) { return FormatUtc(unix_ms, "%Y-%m-%d %H:%M"); }

// The cell's history, or the exit code (its message printed): kExitNotFound without bench runs,
// kExitUsage for an unknown or ambiguous cell, kExitFailure for the store's errors.
int ReadCellHistory(Store& store, const HistoryFlags& f, const std::string& problem_key, const std::string& config_key,
                    regress::CellHistory* history) {
  const std::string cmd = "history";
  absl::StatusOr<regress::CellHistory> read =
      regress::ReadHistory(store, {f.suite, problem_key, config_key, f.device_class});
  if (absl::IsNotFound(read.status())) {
    std::fprintf(stderr, "fusetune history: %s in %s\n", std::string(read.status().message()).c_str(), RedactDatabaseUrl(f.db).c_str());
    return kExitNotFound;
  }
  if (absl::IsInvalidArgument(read.status())) return UsageError(cmd, std::string(read.status().message()));
  if (!read.ok()) return Failure(cmd, std::string(read.status().message()));
  *history = *std::move(read);
  return kExitOk;
}

nlohmann::json HistoryJson(const regress::CellHistory& h, const std::string& suite, const regress::ChangePointResult& result) {
  nlohmann::json series = nlohmann::json::array();
  for (const regress::HistoryPoint& p : h.points) {
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

void PrintHistory(const regress::CellHistory& h, const std::string& suite, const regress::ChangePointResult& result) {
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
    const regress::HistoryPoint& p = h.points[i];
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

// Writes the HTML report of `problem_key`'s cell (every cell when empty); the exit code as
// ReadCellHistory's.
int WriteHistoryHtml(Store& store, const HistoryFlags& f, const std::string& problem_key, const std::string& config_key) {
  const std::string cmd = "history";
  absl::StatusOr<report::HistoryReport> page =
      report::ReadHistoryReport(store, {f.suite, f.device_class, problem_key, config_key}, f.db);
  if (absl::IsNotFound(page.status())) {
    std::fprintf(stderr, "fusetune history: %s in %s\n", std::string(page.status().message()).c_str(), f.db.c_str());
    return kExitNotFound;
  }
  if (absl::IsInvalidArgument(page.status())) return UsageError(cmd, std::string(page.status().message()));
  if (!page.ok()) return Failure(cmd, std::string(page.status().message()));
  page->regress_href = f.html_regress_link;
  if (absl::Status s = report::WriteFileAtomically(f.html, report::HistoryReportHtml(*page)); !s.ok()) {
    return Failure(cmd, std::string(s.message()));
  }
  return kExitOk;
}

int RunHistory(const HistoryFlags& f) {
  const std::string cmd = "history";
  if (f.suite.empty()) return UsageError(cmd, "--suite must not be empty");
  if (f.cell.empty()) {
    // Every cell of the suite: only the HTML report shows them all.
    if (f.html.empty()) return UsageError(cmd, "--cell is required unless --html writes every cell of the suite");
    if (f.record || !f.plot.empty() || f.json) {
      return UsageError(cmd, "--record, --plot and --json need --cell");
    }
    absl::StatusOr<std::unique_ptr<Store>> store = OpenExistingStore(f.db);
    if (!store.ok()) return Failure(cmd, std::string(store.status().message()));
    const int code = WriteHistoryHtml(**store, f, "", "");
    if (code == kExitOk) std::printf("wrote %s\n", f.html.c_str());
    return code;
  }
  const size_t space = f.cell.find(' ');
  const std::string problem_key = f.cell.substr(0, space);
  const std::string config_key = space == std::string::npos ? "" : f.cell.substr(space + 1);
  if (problem_key.empty() || (space != std::string::npos && config_key.empty()) ||
      config_key.find(' ') != std::string::npos) {
    return UsageError(cmd, "--cell must be 'PROBLEM_KEY' or 'PROBLEM_KEY CONFIG_KEY', got '" + f.cell + "'");
  }
  absl::StatusOr<std::unique_ptr<Store>> store = f.record ? OpenExistingStoreForWriting(f.db) : OpenExistingStore(f.db);
  if (!store.ok()) return Failure(cmd, std::string(store.status().message()));
  regress::CellHistory history;
  if (int code = ReadCellHistory(**store, f, problem_key, config_key, &history); code != kExitOk) return code;
  absl::StatusOr<regress::ChangePointResult> result = regress::DetectHistoryChangePoints(history);
  if (!result.ok()) return Failure(cmd, std::string(result.status().message()));
  if (f.record) {
    absl::Status s = regress::RecordChangePoints(**store, history, f.suite, *result);
    if (!s.ok()) return Failure(cmd, std::string(s.message()));
  }
  if (!f.plot.empty()) {
    std::vector<report::HistoryPlotPoint> points;
    std::vector<report::HistoryPlotChange> changes;
    for (const regress::HistoryPoint& p : history.points) points.push_back({p.commit, p.median_us});
    for (const regress::ChangePoint& cp : result->change_points) {
      changes.push_back({cp.index, cp.commit, cp.relative_change});
    }
    std::ofstream out(f.plot, std::ios::binary | std::ios::trunc);
    out << report::HistorySvg(fmt::format("{} {} ({})", history.problem_key, history.config_key, f.suite), points,
                      changes);
    out.close();
    if (!out) return Failure(cmd, "cannot write the plot to " + f.plot);
  }
  if (!f.html.empty()) {
    if (int code = WriteHistoryHtml(**store, f, problem_key, config_key); code != kExitOk) return code;
  }
  if (f.json) {
    std::printf("%s\n", HistoryJson(history, f.suite, *result).dump(2).c_str());
  } else {
    PrintHistory(history, f.suite, *result);
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
  history->add_option("--cell", flags->cell,
                      "'PROBLEM_KEY' or 'PROBLEM_KEY CONFIG_KEY' (required, unless --html writes every cell)");
  history->add_option("--device-class", flags->device_class, "only runs on this device class");
  history->add_option("--plot", flags->plot, "write an SVG line chart with the change points to this file");
  history->add_option("--html", flags->html,
                      "write a self-contained HTML report here: the series of the cell (of every cell of the suite "
                      "without --cell) with its change points; hover a point for its commit, date and clocks");
  history->add_option("--html-regress-link", flags->html_regress_link,
                      "link each cell of the HTML report to its section of this regress page (as `regress --html` "
                      "writes it), e.g. regress.html");
  history->add_flag("--record", flags->record, "store the change points (replacing the cell's earlier ones)");
  history->add_flag("--json", flags->json, "print JSON");
  SetAction(history, context, [flags] { return RunHistory(*flags); });
}

}  // namespace fusetune::cli
