#include "fusetune/report/history_report.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "fusetune/base/strings.h"
#include "fusetune/base/time.h"
#include "fusetune/report/history_plot.h"
#include "fusetune/report/html.h"

namespace fusetune::report {
namespace {

// Bench runs read per suite: more than a nightly suite gathers in decades.
constexpr int kRunsRead = 100000;

// Per (run id, problem key, config key): the lowest and highest SM clock read around the
// cell's blocks (0, 0 when none was read).
using ClockKey = std::tuple<int64_t, std::string, std::string>;

std::string ClockText(std::pair<int, int> range) {
  if (range.second <= 0) return "SM clock not read";
  if (range.first == range.second) return fmt::format("SM clock {} MHz", range.first);
  return fmt::format("SM clock {}–{} MHz", range.first, range.second);
}

std::string CellSection(const HistoryReport& r, const HistoryCellReport& c) {
  const regress::CellHistory& h = c.history;
  std::string html = fmt::format(
      "<section class=\"cell\" id=\"{}\">\n<h3>{} {}</h3>\n<p class=\"note\">device class {}; {} point(s), {} "
      "change point(s){}</p>\n",
      CellAnchor(h.problem_key, h.config_key), HtmlEscape(h.problem_key), HtmlEscape(h.config_key),
      HtmlEscape(h.device_class), h.points.size(), c.changes.change_points.size(),
      c.changes.change_points.empty()
          ? ""
          : fmt::format("; first segment to last {:+.2f} %", 100 * c.changes.cumulative_change));
  std::vector<HistoryPlotPoint> points;
  for (size_t i = 0; i < h.points.size(); ++i) {
    const regress::HistoryPoint& p = h.points[i];
    points.push_back({p.commit, p.median_us,
                      fmt::format("finished {} UTC, run {}, {}", FormatUtc(p.finished_unix_ms, "%Y-%m-%d %H:%M"),
                                  p.run_id, ClockText(c.sm_clock_range_mhz[i]))});
  }
  std::vector<HistoryPlotChange> changes;
  for (const regress::ChangePoint& cp : c.changes.change_points) {
    changes.push_back({cp.index, cp.commit, cp.relative_change});
  }
  html += HistorySvg(fmt::format("{} {}", h.problem_key, h.config_key), points, changes);
  if (!c.changes.change_points.empty()) {
    html += "<table class=\"changes\">\n<thead><tr><th>commit</th><th>direction</th><th>change</th><th>mean before "
            "µs</th><th>mean after µs</th><th>p</th></tr></thead>\n<tbody>\n";
    for (const regress::ChangePoint& cp : c.changes.change_points) {
      html += fmt::format(
          "<tr><td class=\"key\">{}</td><td>{}</td><td class=\"num\">{:+.2f} %</td><td class=\"num\">{}</td>"
          "<td class=\"num\">{}</td><td class=\"num\">{:.2g}</td></tr>\n",
          HtmlEscape(cp.commit), regress::ChangeDirectionName(cp.direction), 100 * cp.relative_change,
          FormatNumber(cp.mean_before, 4), FormatNumber(cp.mean_after, 4), cp.p_value);
    }
    html += "</tbody>\n</table>\n";
  }
  if (!r.regress_href.empty()) {
    html += fmt::format("<p><a class=\"regress-link\" href=\"{}#{}\">this cell in the regress report</a></p>\n",
                        HtmlEscape(r.regress_href), CellAnchor(h.problem_key, h.config_key));
  }
  return html + "</section>\n";
}

}  // namespace

absl::StatusOr<HistoryReport> ReadHistoryReport(Store& store, const HistoryReportQuery& q, const std::string& source) {
  HistoryReport report;
  report.suite = q.suite;
  report.source = source;
  absl::StatusOr<std::vector<RunInfo>> runs = store.ListBenchRuns(q.suite, q.device_class, kRunsRead);
  if (!runs.ok()) return runs.status();
  if (runs->empty()) {
    return absl::NotFoundError(fmt::format("no finished bench run of suite '{}'{}", q.suite,
                                           q.device_class.empty() ? "" : " on device class '" + q.device_class + "'"));
  }
  // Every (device class, problem, config) the suite measured, and the clocks around each block.
  std::set<std::tuple<std::string, std::string, std::string>> cells;
  std::map<ClockKey, std::pair<int, int>> clocks;
  for (const RunInfo& run : *runs) {
    absl::StatusOr<std::vector<BenchCell>> stored = store.ListBenchCells(run.run_id);
    if (!stored.ok()) return stored.status();
    for (const BenchCell& c : *stored) {
      if (c.suite != q.suite || c.outcome != TrialOutcome::kOk || c.blocks.empty()) continue;
      if (!q.problem_key.empty() && (c.problem_key != q.problem_key || (!q.config_key.empty() && c.config_key != q.config_key))) {
        continue;
      }
      cells.insert({run.device.DeviceClass(), c.problem_key, c.config_key});
      std::pair<int, int>& range = clocks[{run.run_id, c.problem_key, c.config_key}];
      for (const SampleBlock& b : c.blocks) {
        for (const DeviceState& s : {b.before, b.after}) {
          if (!s.known || s.sm_clock_mhz <= 0) continue;
          range.first = range.first == 0 ? s.sm_clock_mhz : std::min(range.first, s.sm_clock_mhz);
          range.second = std::max(range.second, s.sm_clock_mhz);
        }
      }
    }
  }
  if (cells.empty() && !q.problem_key.empty()) {
    // The library's own message lists the suite's cells.
    absl::StatusOr<regress::CellHistory> h =
        regress::ReadHistory(store, {q.suite, q.problem_key, q.config_key, q.device_class});
    return h.ok() ? absl::InternalError("the cell has no timed blocks") : h.status();
  }
  std::vector<std::tuple<std::string, std::string, std::string>> ordered(cells.begin(), cells.end());
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
    if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) < std::get<0>(b);
    if (std::get<1>(a) != std::get<1>(b)) return NaturalLess(std::get<1>(a), std::get<1>(b));
    return NaturalLess(std::get<2>(a), std::get<2>(b));
  });
  for (const auto& [device_class, problem_key, config_key] : ordered) {
    absl::StatusOr<regress::CellHistory> h =
        regress::ReadHistory(store, {q.suite, problem_key, config_key, device_class});
    if (!h.ok()) return h.status();
    absl::StatusOr<regress::ChangePointResult> changes = regress::DetectHistoryChangePoints(*h);
    if (!changes.ok()) return changes.status();
    HistoryCellReport cell{*std::move(h), *std::move(changes), {}};
    for (const regress::HistoryPoint& p : cell.history.points) {
      auto it = clocks.find({p.run_id, problem_key, config_key});
      cell.sm_clock_range_mhz.push_back(it == clocks.end() ? std::pair<int, int>{0, 0} : it->second);
    }
    report.cells.push_back(std::move(cell));
  }
  return report;
}

std::string HistoryReportHtml(const HistoryReport& r) {
  std::string body;
  if (r.cells.empty()) {
    body = "<p class=\"empty\">No timed cells in the suite's bench runs.</p>\n";
  } else {
    body = "<h2 id=\"index\">cells</h2>\n<table class=\"sortable index\">\n<thead><tr><th>device class</th><th>cell</th>"
           "<th>points</th><th>change points</th><th>first to last segment</th><th>newest median µs</th></tr></thead>\n"
           "<tbody>\n";
    for (const HistoryCellReport& c : r.cells) {
      const regress::CellHistory& h = c.history;
      const double newest = h.points.empty() ? 0 : h.points.back().median_us;
      body += fmt::format(
          "<tr><td class=\"nowrap\">{}</td><td class=\"key\"><a href=\"#{}\">{} {}</a></td><td class=\"num\">{}</td>"
          "<td class=\"num\">{}</td><td class=\"num\" data-sort=\"{}\">{}</td><td class=\"num\" data-sort=\"{}\">{}</td>"
          "</tr>\n",
          HtmlEscape(h.device_class), CellAnchor(h.problem_key, h.config_key), HtmlEscape(h.problem_key),
          HtmlEscape(h.config_key), h.points.size(), c.changes.change_points.size(), c.changes.cumulative_change,
          c.changes.change_points.empty() ? "-" : fmt::format("{:+.2f} %", 100 * c.changes.cumulative_change),
          newest, FormatNumber(newest, 4));
    }
    body += "</tbody>\n</table>\n<h2 id=\"series\">series</h2>\n<p class=\"note\">Per bench run, the median of the "
            "cell's block medians, oldest first; red dashed lines are change points (E-divisive means, t-test p ≤ "
            "0.001), labelled with the first commit at the new level and the change. Hover a point for its commit, "
            "date and clocks.</p>\n";
  }
  for (const HistoryCellReport& c : r.cells) body += CellSection(r, c);
  return RenderPage({fmt::format("fusetune history: suite {}", r.suite),
                     fmt::format("{} cell(s), from {}", r.cells.size(), r.source), body});
}

}  // namespace fusetune::report
