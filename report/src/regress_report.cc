#include "fusetune/report/regress_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "fusetune/base/median.h"
#include "fusetune/regress/junit.h"
#include "fusetune/report/html.h"

namespace fusetune::report {
namespace {

absl::StatusOr<regress::Verdict> ParseVerdictName(const std::string& name) {
  for (regress::Verdict v : {regress::Verdict::kRegressed, regress::Verdict::kImproved, regress::Verdict::kSame,
                             regress::Verdict::kUnknown}) {
    if (name == regress::VerdictName(v)) return v;
  }
  return absl::InvalidArgumentError("unknown verdict " + name);
}

std::string VerdictClass(const regress::CellVerdict& v) {
  return fmt::format("verdict-{}", regress::VerdictName(v.verdict));
}

std::string AccuracyText(const regress::AccuracyVerdict& a) {
  if (!a.checked) return "not checked";
  if (a.failed) return "FAILED: above the tolerance";
  if (a.grew) return fmt::format("grew {}× (flagged)", FormatNumber(a.growth));
  return std::isfinite(a.growth) ? fmt::format("ok ({}× the baseline's error)", FormatNumber(a.growth)) : "ok";
}

std::string Percent(double relative) { return fmt::format("{:.2f} %", 100 * relative); }

std::string RatioText(const regress::CellVerdict& v) {
  if (v.baseline_blocks == 0 || v.candidate_blocks == 0) return "-";
  return fmt::format("{:.4f} [{:.4f}, {:.4f}]", v.ratio.pairwise_ratio, v.ratio.lower, v.ratio.upper);
}

// Both builds' block medians as dots on one time axis, each side's median a tick; a band
// shows the floor around the baseline's median (inside it a change is too small to call).
std::string StripPlotSvg(const RegressCell& c) {
  constexpr double kWidth = 600, kLeft = 74, kRight = 44, kRowH = 34, kTop = 10;
  std::vector<double> all = c.baseline_us;
  all.insert(all.end(), c.candidate_us.begin(), c.candidate_us.end());
  all.erase(std::remove_if(all.begin(), all.end(), [](double v) { return !(v > 0) || !std::isfinite(v); }), all.end());
  const double height = kTop + 2 * kRowH + 30;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"strip\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-size=\"11\">\n",
      kWidth, height);
  if (all.empty()) {
    return svg + "<text x=\"10\" y=\"30\" fill=\"#777777\">no timed blocks on either side</text>\n</svg>\n";
  }
  double low = *std::min_element(all.begin(), all.end()), high = *std::max_element(all.begin(), all.end());
  const double base_median = c.baseline_us.empty() ? 0 : Median(c.baseline_us);
  const bool floor_known = c.verdict.floor > 0;  // not stored with a verdict row
  if (base_median > 0 && floor_known) {  // the floor's band must be on the axis too
    low = std::min(low, base_median / (1 + c.verdict.floor));
    high = std::max(high, base_median * (1 + c.verdict.floor));
  }
  const double pad = std::max((high - low) * 0.08, high * 1e-4);
  low -= pad;
  high += pad;
  const double plot_w = kWidth - kLeft - kRight;
  auto x_of = [&](double us) { return kLeft + plot_w * (us - low) / (high - low); };
  if (base_median > 0 && floor_known) {
    const double x0 = x_of(base_median / (1 + c.verdict.floor)), x1 = x_of(base_median * (1 + c.verdict.floor));
    svg += fmt::format(
        "<rect class=\"floor\" x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"#eef3fb\">"
        "<title>the floor: ±{} around the baseline's median</title></rect>\n",
        x0, kTop, std::max(1.0, x1 - x0), 2 * kRowH, Percent(c.verdict.floor));
  }
  const struct {
    const char* label;
    const std::vector<double>* values;
    const char* colour;
  } rows[] = {{"baseline", &c.baseline_us, "#555555"}, {"candidate", &c.candidate_us, "#3b7dd8"}};
  for (int r = 0; r < 2; ++r) {
    const double y = kTop + kRowH * (r + 0.5);
    svg += fmt::format("<g class=\"side side-{0}\"><text x=\"0\" y=\"{1:.1f}\">{0}</text>\n", rows[r].label, y + 4);
    const std::vector<double>& values = *rows[r].values;
    if (values.empty()) {
      svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" fill=\"#777777\">no timed blocks</text>", kLeft, y + 4);
    }
    for (size_t i = 0; i < values.size(); ++i) {
      if (!(values[i] > 0) || !std::isfinite(values[i])) continue;
      // A small vertical jitter by block index keeps equal times apart; deterministic.
      const double jitter = (static_cast<double>(i % 5) - 2) * 2.5;
      svg += fmt::format(
          "<circle class=\"block\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\" fill-opacity=\"0.7\">"
          "<title>{} block {}: {} µs</title></circle>\n",
          x_of(values[i]), y + jitter, rows[r].colour, rows[r].label, i + 1, FormatNumber(values[i], 5));
    }
    if (!values.empty()) {
      const double m = Median(values);
      svg += fmt::format(
          "<line class=\"median\" x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\" "
          "stroke-width=\"2\"><title>{4} median {5} µs</title></line>\n",
          x_of(m), y - 12, y + 12, rows[r].colour, rows[r].label, FormatNumber(m, 5));
    }
    svg += "</g>\n";
  }
  const double axis_y = kTop + 2 * kRowH;
  svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#000000\"/>\n", kLeft, axis_y,
                     kLeft + plot_w, axis_y);
  for (int k = 0; k <= 4; ++k) {
    const double v = low + (high - low) * k / 4;
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#000000\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4} µs</text>\n",
        x_of(v), axis_y, axis_y + 4, axis_y + 16, FormatNumber(v, 4));
  }
  return svg + "</svg>\n";
}

std::string CheckText(const regress::CellCheck& check) {
  if (check.outcome != TrialOutcome::kOk) {
    return fmt::format("{}: {}", TrialOutcomeName(check.outcome), check.message);
  }
  return fmt::format("max rel error {:.3g} (tolerance {:.3g}), max abs error {:.3g}", check.max_rel_error,
                     check.tolerance, check.max_abs_error);
}

constexpr char kNotStored[] = "not stored (the run's own page, regress --html, has it)";

std::string CellSection(const RegressReport& r, const RegressCell& c) {
  const regress::CellVerdict& v = c.verdict;
  if (r.from_store) {
    std::string html = fmt::format("<section class=\"cell\" id=\"{}\">\n<h3><span class=\"{}\">{}</span> {}</h3>\n",
                                   CellAnchor(c.problem_key, c.config_key), VerdictClass(v),
                                   regress::VerdictName(v.verdict), HtmlEscape(c.name));
    html += "<div class=\"overview\">\n<dl class=\"env summary\">\n";
    html += fmt::format("<dt>ratio</dt><dd class=\"ratio\">{:.4f} (candidate / baseline, Hodges–Lehmann)</dd>\n",
                        v.ratio.pairwise_ratio);
    html += fmt::format("<dt>p (adjusted)</dt><dd>{:.3g}, of the direction the ratio leans</dd>\n", v.p_slower_adjusted);
    html += fmt::format("<dt>floor</dt><dd class=\"floor\">{}</dd>\n", kNotStored);
    html += fmt::format("<dt>why</dt><dd class=\"why\">{}</dd>\n", kNotStored);
    html += fmt::format("<dt>accuracy</dt><dd class=\"{}\">{}</dd>\n",
                        v.accuracy.failed || v.accuracy.grew ? "accuracy-failed" : "accuracy",
                        HtmlEscape(AccuracyText(v.accuracy)));
    html += fmt::format("<dt>blocks</dt><dd>baseline {}, candidate {} (from the stored bench runs)</dd>\n",
                        c.baseline_us.size(), c.candidate_us.size());
    html += "</dl>\n<div>" + StripPlotSvg(c) + "</div>\n</div>\n";
    if (!r.history_href.empty()) {
      html += fmt::format("<p><a class=\"history-link\" href=\"{}#{}\">history of this cell</a></p>\n",
                          HtmlEscape(r.history_href), CellAnchor(c.problem_key, c.config_key));
    }
    return html + "</section>\n";
  }
  std::string html = fmt::format("<section class=\"cell\" id=\"{}\">\n<h3><span class=\"{}\">{}</span> {}</h3>\n",
                                 CellAnchor(c.problem_key, c.config_key), VerdictClass(v),
                                 regress::VerdictName(v.verdict), HtmlEscape(c.name));
  html += "<div class=\"overview\">\n<dl class=\"env summary\">\n";
  html += fmt::format("<dt>role</dt><dd>{}</dd>\n", HtmlEscape(c.role));
  html += fmt::format("<dt>ratio</dt><dd class=\"ratio\">{} (candidate / baseline, Hodges–Lehmann, {:.0f} % interval)</dd>\n",
                      RatioText(v), 100 * v.ratio.confidence);
  html += fmt::format("<dt>floor</dt><dd class=\"floor\">{}</dd>\n", Percent(v.floor));
  html += fmt::format("<dt>p (adjusted)</dt><dd>slower {:.3g}, faster {:.3g}</dd>\n", v.p_slower_adjusted,
                      v.p_faster_adjusted);
  html += fmt::format("<dt>blocks</dt><dd>baseline {}, candidate {}</dd>\n", v.baseline_blocks, v.candidate_blocks);
  html += fmt::format("<dt>{}</dt><dd class=\"why\">{}</dd>\n",
                      v.verdict == regress::Verdict::kUnknown ? "why unknown" : "why", HtmlEscape(v.why));
  html += fmt::format("<dt>accuracy</dt><dd class=\"{}\">{}</dd>\n",
                      v.accuracy.failed || v.accuracy.grew ? "accuracy-failed" : "accuracy",
                      HtmlEscape(AccuracyText(v.accuracy)));
  html += fmt::format("<dt>baseline check</dt><dd>{}</dd>\n", HtmlEscape(CheckText(c.baseline_check)));
  html += fmt::format("<dt>candidate check</dt><dd>{}</dd>\n", HtmlEscape(CheckText(c.candidate_check)));
  html += "</dl>\n<div>" + StripPlotSvg(c) + "</div>\n</div>\n";
  if (!r.history_href.empty()) {
    html += fmt::format("<p><a class=\"history-link\" href=\"{}#{}\">history of this cell</a></p>\n",
                        HtmlEscape(r.history_href), CellAnchor(c.problem_key, c.config_key));
  }
  return html + "</section>\n";
}

std::string SideText(const regress::SourceInfo& s) {
  // Only what the side reported: a field it left empty is left out, not shown as "()".
  std::vector<std::string> details;
  if (!s.device.driver.empty()) details.push_back(s.device.driver);
  if (s.device.max_clock_mhz > 0) details.push_back(fmt::format("max clock {} MHz", s.device.max_clock_mhz));
  if (!s.environment.empty() && s.environment != s.device.driver) details.push_back(s.environment);
  std::string text = s.commit;
  if (!s.device.name.empty()) text += " on " + s.device.name;
  if (!details.empty()) text += fmt::format(" ({})", fmt::join(details, "; "));
  return text;
}

}  // namespace

RegressReport RegressReportFromComparison(const regress::Suite& suite, const regress::Comparison& comparison,
                                          const std::vector<std::string>& notes, bool calibration) {
  RegressReport r;
  r.suite = suite.name;
  r.device_class = comparison.candidate.device.DeviceClass();
  r.baseline = comparison.baseline;
  r.candidate = comparison.candidate;
  r.interleaved = comparison.interleaved;
  r.calibration = calibration;
  r.notes = notes;
  r.blocks_measured = comparison.blocks_measured;
  r.measure_seconds = comparison.measure_seconds;
  for (const regress::CellComparison& c : comparison.cells) {
    RegressCell cell;
    cell.name = c.cell.Name();
    cell.problem_key = c.cell.problem.Key();
    cell.config_key = c.cell.config.Key();
    cell.role = c.cell.role;
    cell.verdict = c.verdict;
    cell.baseline_check = c.baseline.check;
    cell.candidate_check = c.candidate.check;
    cell.baseline_us = c.baseline.Medians();
    cell.candidate_us = c.candidate.Medians();
    r.cells.push_back(std::move(cell));
  }
  return r;
}

absl::StatusOr<RegressReport> ReadStoredRegressReport(Store& store, const std::string& commit) {
  constexpr int kRowsRead = 100000;
  absl::StatusOr<std::vector<Regression>> rows = store.ListRegressions(commit, kRowsRead);
  if (!rows.ok()) return rows.status();
  rows->erase(std::remove_if(rows->begin(), rows->end(), [](const Regression& row) { return row.metric == "planted_latency"; }),
              rows->end());
  if (rows->empty()) return absl::NotFoundError(fmt::format("no stored verdict of commit {}", commit));
  RegressReport r;
  r.from_store = true;
  r.candidate.commit = commit;
  r.baseline.commit = rows->front().baseline_commit;
  r.device_class = rows->front().device_class;
  r.calibration = r.baseline.commit == commit;
  // Both commits' blocks of every cell, from the suites' bench runs (the newest of each).
  std::map<std::pair<std::string, std::string>, std::vector<double>> baseline_blocks, candidate_blocks;
  absl::StatusOr<std::vector<std::string>> suites = store.ListBenchSuites();
  if (!suites.ok()) return suites.status();
  for (const std::string& suite : *suites) {
    for (auto [side_commit, blocks] : {std::pair{commit, &candidate_blocks}, std::pair{r.baseline.commit, &baseline_blocks}}) {
      absl::StatusOr<RunInfo> run = store.FindBenchRun(suite, r.device_class, side_commit);
      if (absl::IsNotFound(run.status())) continue;
      if (!run.ok()) return run.status();
      if (r.suite.empty()) r.suite = suite;
      if (side_commit == commit) r.candidate.device = run->device;
      if (side_commit == r.baseline.commit) r.baseline.device = run->device;
      absl::StatusOr<std::vector<BenchCell>> cells = store.ListBenchCells(run->run_id);
      if (!cells.ok()) return cells.status();
      for (const BenchCell& c : *cells) {
        if (c.suite == suite && !c.blocks.empty()) blocks->emplace(std::pair{c.problem_key, c.config_key}, c.SamplesUs());
      }
    }
  }
  if (r.suite.empty()) r.suite = "(no bench run stored)";
  // The newest row per cell and metric; the latency row makes the cell, the error row its
  // accuracy.
  std::map<std::pair<std::string, std::string>, RegressCell> cells;
  std::set<std::tuple<std::string, std::string, std::string>> seen;
  for (const Regression& row : *rows) {
    if (row.baseline_commit != r.baseline.commit || row.device_class != r.device_class) continue;
    if (!seen.insert({row.problem_key, row.config_key, row.metric}).second) continue;
    const std::pair<std::string, std::string> key{row.problem_key, row.config_key};
    RegressCell& cell = cells[key];
    cell.name = row.problem_key + " " + row.config_key;
    cell.problem_key = row.problem_key;
    cell.config_key = row.config_key;
    absl::StatusOr<regress::Verdict> verdict = ParseVerdictName(row.verdict);
    if (row.metric == "max_rel_error") {
      cell.verdict.accuracy.checked = true;
      // A stored row says the cell was flagged, not whether above the tolerance or by growth.
      cell.verdict.accuracy.grew = verdict.ok() && *verdict == regress::Verdict::kRegressed;
      cell.verdict.accuracy.growth = row.ratio;
      continue;
    }
    cell.role = row.metric == "latency" ? "best" : row.metric;
    cell.verdict.verdict = verdict.ok() ? *verdict : regress::Verdict::kUnknown;
    cell.verdict.ratio.pairwise_ratio = row.ratio;
    cell.verdict.p_slower_adjusted = row.p_value;
    if (auto it = baseline_blocks.find(key); it != baseline_blocks.end()) cell.baseline_us = it->second;
    if (auto it = candidate_blocks.find(key); it != candidate_blocks.end()) cell.candidate_us = it->second;
    cell.verdict.baseline_blocks = static_cast<int>(cell.baseline_us.size());
    cell.verdict.candidate_blocks = static_cast<int>(cell.candidate_us.size());
  }
  for (auto& [key, cell] : cells) {
    if (cell.role.empty()) continue;  // an accuracy row without its latency row
    r.cells.push_back(std::move(cell));
  }
  return r;
}

std::string RegressReportHtml(const RegressReport& r) {
  std::vector<const RegressCell*> sorted;
  for (const RegressCell& c : r.cells) sorted.push_back(&c);
  // Most severe first (the markdown report's order); within a rank the larger slowdown first,
  // then by name, so that the order never depends on the suite's order.
  std::stable_sort(sorted.begin(), sorted.end(), [](const RegressCell* a, const RegressCell* b) {
    const int ra = regress::SeverityRank(a->verdict), rb = regress::SeverityRank(b->verdict);
    if (ra != rb) return ra < rb;
    if (a->verdict.ratio.pairwise_ratio != b->verdict.ratio.pairwise_ratio) {
      return a->verdict.ratio.pairwise_ratio > b->verdict.ratio.pairwise_ratio;
    }
    return a->name < b->name;
  });
  int counts[4] = {0, 0, 0, 0};
  int accuracy_findings = 0;
  for (const RegressCell& c : r.cells) {
    ++counts[static_cast<int>(c.verdict.verdict)];
    if (c.verdict.accuracy.failed || c.verdict.accuracy.grew) ++accuracy_findings;
  }
  std::string body = fmt::format(
      "<p class=\"counts\">{} cells: <span class=\"verdict-regressed\">{} regressed</span>, "
      "<span class=\"verdict-improved\">{} improved</span>, {} same, <span class=\"verdict-unknown\">{} "
      "unknown</span>; {} with an accuracy finding.</p>\n",
      r.cells.size(), counts[0], counts[1], counts[2], counts[3], accuracy_findings);
  body += "<dl class=\"env\">\n";
  body += fmt::format("<dt>baseline</dt><dd>{}</dd>\n", HtmlEscape(SideText(r.baseline)));
  body += fmt::format("<dt>candidate</dt><dd>{}</dd>\n", HtmlEscape(SideText(r.candidate)));
  body += fmt::format("<dt>method</dt><dd>{}{}</dd>\n",
                      r.from_store ? "the verdicts as stored, with the bench runs' blocks of both commits"
                      : r.interleaved ? "both builds measured interleaved"
                                      : "against the baseline's stored blocks",
                      r.calibration ? "; an A/A calibration: its timing verdicts do not gate" : "");
  if (r.from_store) {
    body += r.calibration ? "<dt>blocks</dt><dd>a calibration stores one bench run: both sides show its blocks</dd>\n</dl>\n"
                          : "<dt>blocks</dt><dd>each commit's stored bench run of the suite</dd>\n</dl>\n";
  } else {
    body += fmt::format("<dt>measured</dt><dd>{} blocks{}</dd>\n</dl>\n", r.blocks_measured,
                        r.measure_seconds > 0 ? fmt::format(" in {} s", FormatNumber(r.measure_seconds)) : "");
  }
  if (!r.notes.empty()) {
    body += "<ul class=\"notes\">\n";
    for (const std::string& n : r.notes) body += fmt::format("<li>{}</li>\n", HtmlEscape(n));
    body += "</ul>\n";
  }
  body += fmt::format(
      "<h2 id=\"verdicts\">verdicts</h2>\n<table class=\"sortable verdicts\">\n<thead><tr><th>verdict</th><th>cell</th>"
      "<th>ratio [interval]</th><th>floor</th><th>{}</th><th>accuracy</th></tr></thead>\n<tbody>\n",
      r.from_store ? "p (adj., the direction it leans)" : "p slower (adj.)");
  for (size_t i = 0; i < sorted.size(); ++i) {
    const RegressCell& c = *sorted[i];
    const regress::CellVerdict& v = c.verdict;
    body += fmt::format(
        "<tr><td class=\"{}\" data-sort=\"{}\">{}</td><td class=\"key\"><a href=\"#{}\">{}</a></td>"
        "<td class=\"num\" data-sort=\"{}\">{}</td><td class=\"num\" data-sort=\"{}\">{}</td>"
        "<td class=\"num\" data-sort=\"{}\">{:.3g}</td><td class=\"{}\">{}</td></tr>\n",
        VerdictClass(v), i, regress::VerdictName(v.verdict), CellAnchor(c.problem_key, c.config_key),
        HtmlEscape(c.name), v.ratio.pairwise_ratio,
        r.from_store ? fmt::format("{:.4f}", v.ratio.pairwise_ratio) : RatioText(v), v.floor,
        r.from_store ? "not stored" : Percent(v.floor), v.p_slower_adjusted,
        v.p_slower_adjusted, v.accuracy.failed || v.accuracy.grew ? "accuracy-failed" : "accuracy",
        HtmlEscape(AccuracyText(v.accuracy)));
  }
  body += "</tbody>\n</table>\n";
  body += "<h2 id=\"accuracy\">accuracy findings</h2>\n";
  if (accuracy_findings == 0) {
    body += "<p class=\"accuracy-none\">None: every checked cell's error is within its tolerance and did not grow "
            "past the limit.</p>\n";
  } else {
    body += "<ul class=\"accuracy-findings\">\n";
    for (const RegressCell* c : sorted) {
      const regress::AccuracyVerdict& a = c->verdict.accuracy;
      if (!a.failed && !a.grew) continue;
      body += fmt::format("<li><a href=\"#{}\">{}</a>: {}; baseline {}; candidate {}</li>\n",
                          CellAnchor(c->problem_key, c->config_key), HtmlEscape(c->name),
                          HtmlEscape(AccuracyText(a)), HtmlEscape(CheckText(c->baseline_check)),
                          HtmlEscape(CheckText(c->candidate_check)));
    }
    body += "</ul>\n";
  }
  body += "<h2 id=\"cells\">cells</h2>\n<p class=\"note\">Each dot is one block's median (hover for it); the "
          "ticks are each side's median; the shaded band is the floor around the baseline's median.</p>\n";
  for (const RegressCell* c : sorted) body += CellSection(r, *c);
  return RenderPage({fmt::format("fusetune regress: suite {}, {} against {}", r.suite, r.candidate.commit,
                                 r.baseline.commit),
                     fmt::format("device class {}{}", r.device_class, r.calibration ? " (A/A calibration)" : ""),
                     body});
}

}  // namespace fusetune::report
