#include "fusetune/report/tuning_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "fusetune/base/strings.h"
#include "fusetune/base/time.h"
#include "fusetune/kernels/problem.h"
#include "fusetune/report/device_peaks.h"
#include "fusetune/report/html.h"
#include "heatmap.h"

namespace fusetune::report {
namespace {

// Audits searched per problem for the newest one of the pick (an audit of an earlier pick says
// nothing about this one).
constexpr int kAuditsSearched = 100;
// Trials read per problem when the pick names no run.
constexpr int kTrialsWithoutRun = 100000;

// Per config, what its trials say: timed (the screen median, else the fastest timed median),
// else the most telling failure. `trials` are in insertion order.
std::vector<ConfigResult> ConfigResults(const std::vector<Trial>& trials) {
  struct Seen {
    bool timed = false;
    bool screen_timed = false;
    double median_us = 0;
    TrialOutcome outcome = TrialOutcome::kInterrupted;
    std::string message;
    bool any_outcome = false;
  };
  std::map<std::string, Seen> seen;
  for (const Trial& t : trials) {
    Seen& s = seen[t.config_key];
    if (t.outcome == TrialOutcome::kOk && t.median_us > 0) {
      const bool screen = t.stage == TrialStage::kScreen;
      // One measurement for every config: the screen's, so that the colours compare like with like.
      if (!s.timed || (screen && !s.screen_timed) || (screen == s.screen_timed && t.median_us < s.median_us)) {
        s.median_us = t.median_us;
        s.screen_timed = s.screen_timed || screen;
      }
      s.timed = true;
    } else if (t.outcome != TrialOutcome::kOk && (!s.any_outcome || s.outcome == TrialOutcome::kInterrupted)) {
      // An interruption is not a property of the config: any other outcome tells more.
      s.outcome = t.outcome;
      s.message = t.message;
      s.any_outcome = true;
    }
  }
  std::vector<ConfigResult> results;
  for (const auto& [key, s] : seen) {
    absl::StatusOr<KernelConfig> config = KernelConfig::FromKey(key);
    if (!config.ok()) continue;  // a key this build cannot parse has no place on the grid
    ConfigResult r;
    r.config_key = key;
    r.config = *config;
    if (s.timed) {
      r.outcome = TrialOutcome::kOk;
      r.median_us = s.median_us;
    } else {
      r.outcome = s.outcome;
      r.message = s.message;
    }
    results.push_back(std::move(r));
  }
  std::sort(results.begin(), results.end(),
            [](const ConfigResult& a, const ConfigResult& b) { return ConfigOrderLess(a.config, b.config); });
  return results;
}

// ---- the page

struct Throughput {
  bool known = false;
  bool decode = false;
  double value = 0;         // TFLOP/s (prefill) or TB/s (decode)
  std::string unit;         // "TFLOP/s" or "TB/s"
  std::optional<double> percent_of_peak;
  std::string peak_text;    // what peak was assumed, or "unknown peak"
};

Throughput ThroughputOf(const std::string& device_class, const BestConfig& b) {
  Throughput t;
  absl::StatusOr<AttentionProblem> problem = AttentionProblem::FromKey(b.problem_key);
  absl::StatusOr<KernelConfig> config = KernelConfig::FromKey(b.config_key);
  if (!problem.ok() || !(b.median_us > 0)) {
    t.peak_text = "throughput unknown (the problem key does not give the shape)";
    return t;
  }
  t.known = true;
  t.decode = problem->kind == ProblemKind::kDecode;
  const double seconds = b.median_us * 1e-6;
  t.value = (t.decode ? problem->KVBytesRead() : problem->Flops()) / seconds / 1e12;
  t.unit = t.decode ? "TB/s" : "TFLOP/s";
  std::optional<DevicePeak> peak =
      KnownPeak(device_class, config.ok() ? config->precision : Precision::kFp32);
  if (!peak.has_value()) {
    t.peak_text = "unknown peak";
    return t;
  }
  const double peak_value = t.decode ? peak->tbps : peak->tflops;
  t.percent_of_peak = 100 * t.value / peak_value;
  t.peak_text = fmt::format("of {:g} {} ({})", peak_value, t.unit, peak->basis);
  return t;
}

std::string ProblemAnchor(const std::string& device_class, const std::string& problem_key) {
  return AnchorId("problem", Cat(device_class, " ", problem_key));
}

std::string RegretText(const std::optional<AuditSummary>& a) {
  if (!a.has_value()) return "not audited";
  return fmt::format("{:.2f} % (90 % interval {:.2f} to {:.2f} %, {} rounds; fastest measured {})", 100 * a->regret,
                     100 * a->regret_low, 100 * a->regret_high, a->rounds, a->best_config_key);
}

std::string SpeedupText(double s) { return s > 0 ? fmt::format("{:.2f}×", s) : "-"; }

// A panel of the heatmap: one variant, precision and thread count.
using PanelKey = std::tuple<Variant, Precision, int>;

std::string OutcomeMark(TrialOutcome o) {
  switch (o) {
    case TrialOutcome::kUnsupported: return "u";
    case TrialOutcome::kInterrupted: return "i";
    case TrialOutcome::kOk: return "";
    default: return "✕";
  }
}

// One panel: rows block_m, columns block_s; a cell per (block_m, block_s), the fastest timed
// config there when several stages or split counts share it (its title lists them all).
std::string PanelSvg(const std::vector<const ConfigResult*>& configs, const std::string& best_key, double fastest,
                     double slowest) {
  std::set<int> ms, ss;
  for (const ConfigResult* c : configs) {
    ms.insert(c->config.block_m);
    ss.insert(c->config.block_s);
  }
  constexpr double kCellW = 34, kCellH = 22, kLeft = 50, kTop = 34;
  const std::vector<int> m_values(ms.begin(), ms.end()), s_values(ss.begin(), ss.end());
  const double width = kLeft + kCellW * static_cast<double>(s_values.size()) + 6;
  const double height = kTop + kCellH * static_cast<double>(m_values.size()) + 6;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"heatmap\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-size=\"10\">\n"
      "<text x=\"{2}\" y=\"10\" text-anchor=\"middle\" fill=\"#555555\">block_s</text>\n"
      "<text x=\"10\" y=\"{3}\" text-anchor=\"middle\" fill=\"#555555\" transform=\"rotate(-90 10 {3})\">block_m</text>\n",
      width, height, kLeft + kCellW * static_cast<double>(s_values.size()) / 2,
      kTop + kCellH * static_cast<double>(m_values.size()) / 2);
  for (size_t j = 0; j < s_values.size(); ++j) {
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                       kLeft + kCellW * (static_cast<double>(j) + 0.5), kTop - 6, s_values[j]);
  }
  for (size_t i = 0; i < m_values.size(); ++i) {
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", kLeft - 5,
                       kTop + kCellH * (static_cast<double>(i) + 0.5) + 4, m_values[i]);
    for (size_t j = 0; j < s_values.size(); ++j) {
      std::vector<const ConfigResult*> here;
      for (const ConfigResult* c : configs) {
        if (c->config.block_m == m_values[i] && c->config.block_s == s_values[j]) here.push_back(c);
      }
      if (here.empty()) continue;
      const ConfigResult* shown = here.front();
      bool is_best = false;
      for (const ConfigResult* c : here) {
        is_best = is_best || c->config_key == best_key;
        const bool faster = c->outcome == TrialOutcome::kOk &&
                            (shown->outcome != TrialOutcome::kOk || c->median_us < shown->median_us);
        if (faster) shown = c;
      }
      std::string title;
      for (const ConfigResult* c : here) {
        if (!title.empty()) title += "\n";
        title += c->outcome == TrialOutcome::kOk
                     ? fmt::format("{}: {} µs", c->config_key, FormatNumber(c->median_us, 4))
                     : fmt::format("{}: {}{}{}", c->config_key, TrialOutcomeName(c->outcome),
                                   c->message.empty() ? "" : " — ", c->message);
        if (c->config_key == best_key) title += " (the pick)";
      }
      const double x = kLeft + kCellW * static_cast<double>(j), y = kTop + kCellH * static_cast<double>(i);
      std::string fill = "#ffffff", stroke = "#ffffff", dash, mark_colour = "#000000";
      const TrialOutcome o = shown->outcome;
      if (o == TrialOutcome::kOk) {
        fill = internal::TimeColour(shown->median_us, fastest, slowest);
      } else if (o == TrialOutcome::kUnsupported) {
        fill = "#f2f2f2";
        stroke = "#bbbbbb";
        mark_colour = "#777777";
      } else if (o == TrialOutcome::kInterrupted) {
        stroke = "#bbbbbb";
        dash = " stroke-dasharray=\"2 2\"";
        mark_colour = "#777777";
      } else {
        fill = "#444444";
        mark_colour = "#ffffff";
      }
      svg += fmt::format(
          "<g class=\"config outcome-{0}{1}\"><title>{2}</title>"
          "<rect x=\"{3}\" y=\"{4}\" width=\"{5}\" height=\"{6}\" fill=\"{7}\" stroke=\"{8}\"{9}/>",
          TrialOutcomeName(o), is_best ? " best" : "", HtmlEscape(title), x + 1, y + 1, kCellW - 2, kCellH - 2, fill,
          stroke, dash);
      const std::string mark = OutcomeMark(o);
      if (!mark.empty()) {
        svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"{}\">{}</text>", x + kCellW / 2,
                           y + kCellH / 2 + 4, mark_colour, mark);
      }
      if (is_best) {
        svg += fmt::format(
            "<rect class=\"pick\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#000000\" "
            "stroke-width=\"2.5\"/>",
            x + 2, y + 2, kCellW - 4, kCellH - 4);
      }
      svg += "</g>\n";
    }
  }
  svg += "</svg>\n";
  return svg;
}

// The three variants' best times as bars on one scale, with the fused speedups.
std::string VariantsSvg(const ProblemResult& p) {
  struct Bar {
    std::string variant;
    double us;
    std::string note;
  };
  const BestConfig& b = p.best;
  std::vector<Bar> bars = {{"fused", b.median_us, b.config_key},
                           {"partial", b.best_partial_us, SpeedupText(b.speedup_vs_partial) + " the fused time"},
                           {"materialized", b.best_materialized_us,
                            SpeedupText(b.speedup_vs_materialized) + " the fused time"}};
  // The pick may be a baseline variant (nothing fused ran): then its bar is the pick.
  absl::StatusOr<KernelConfig> pick = KernelConfig::FromKey(b.config_key);
  if (pick.ok() && pick->variant != Variant::kFused) {
    bars[0] = {"fused", 0, "no fused config verified"};
    for (Bar& bar : bars) {
      if (bar.variant == VariantName(pick->variant)) bar = {bar.variant, b.median_us, b.config_key + " (the pick)"};
    }
  }
  double longest = 0;
  for (const Bar& bar : bars) longest = std::max(longest, bar.us);
  constexpr double kLabelW = 90, kBarW = 240, kRowH = 22;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"variants\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-size=\"11\">\n",
      kLabelW + kBarW + 300, kRowH * 3 + 4);
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& bar = bars[i];
    const double y = kRowH * static_cast<double>(i) + 2;
    svg += fmt::format("<g class=\"variant variant-{}\"><text x=\"0\" y=\"{}\">{}</text>", bar.variant, y + 14,
                       bar.variant);
    if (bar.us > 0 && longest > 0) {
      const double w = std::max(1.0, kBarW * bar.us / longest);
      svg += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"><title>{} {} µs</title></rect>"
          "<text x=\"{:.1f}\" y=\"{}\">{} µs  {}</text>",
          kLabelW, y + 2, w, kRowH - 6, i == 0 ? "#3b7dd8" : "#9aa7b8", bar.variant, FormatNumber(bar.us, 4),
          kLabelW + w + 6, y + 14, FormatNumber(bar.us, 4), HtmlEscape(bar.note));
    } else {
      svg += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#777777\">not measured</text>", kLabelW, y + 14);
    }
    svg += "</g>\n";
  }
  svg += "</svg>\n";
  return svg;
}

std::string ProblemSection(const DeviceResults& d, const ProblemResult& p, int index) {
  const BestConfig& b = p.best;
  const Throughput t = ThroughputOf(d.device_class, b);
  std::string html = fmt::format("<section class=\"problem\" id=\"{}\">\n<h3>{}</h3>\n",
                                 ProblemAnchor(d.device_class, b.problem_key), HtmlEscape(b.problem_key));
  html += "<div class=\"overview\">\n<dl class=\"env summary\">\n";
  html += fmt::format("<dt>pick</dt><dd>{}</dd>\n", HtmlEscape(b.config_key));
  html += fmt::format("<dt>median</dt><dd>{} µs (p10 {} – p90 {} µs)</dd>\n", FormatNumber(b.median_us, 4),
                      FormatNumber(b.p10_us, 4), FormatNumber(b.p90_us, 4));
  if (t.known) {
    html += fmt::format("<dt>throughput</dt><dd class=\"peak\">{} {}{} {}</dd>\n", FormatNumber(t.value), t.unit,
                        t.percent_of_peak ? fmt::format(" = {:.1f} %", *t.percent_of_peak) : ",",
                        HtmlEscape(t.peak_text));
  } else {
    html += fmt::format("<dt>throughput</dt><dd class=\"peak\">{}</dd>\n", HtmlEscape(t.peak_text));
  }
  html += fmt::format("<dt>max error</dt><dd>relative {:.2e}, absolute {:.2e}</dd>\n", b.max_rel_error,
                      b.max_abs_error);
  if (p.unquantised_rel_error.has_value()) {
    html += fmt::format(
        "<dt>vs unquantised K/V</dt><dd class=\"unquantised\">relative {:.2e} (the e4m3 cache's cost: the same "
        "output against the reference of K/V before quantisation)</dd>\n",
        *p.unquantised_rel_error);
  }
  html += fmt::format("<dt>audit regret</dt><dd class=\"regret\">{}</dd>\n", HtmlEscape(RegretText(p.audit)));
  html += fmt::format("<dt>from</dt><dd>run {} at commit {}</dd>\n</dl>\n", b.run_id, HtmlEscape(b.commit));
  html += "<div><h4>variants, best of each</h4>\n" + VariantsSvg(p) + "</div>\n</div>\n";

  // Heatmaps: one row of panels per variant, one panel per precision and thread count; the
  // colours share one scale over the whole problem so that panels compare.
  double fastest = 0, slowest = 0;
  for (const ConfigResult& c : p.configs) {
    if (c.outcome != TrialOutcome::kOk) continue;
    fastest = fastest == 0 ? c.median_us : std::min(fastest, c.median_us);
    slowest = std::max(slowest, c.median_us);
  }
  if (p.configs.empty()) {
    html += "<p class=\"note\">No trials of this problem in the pick's run: no config space to show.</p>\n";
    return html + "</section>\n";
  }
  std::map<PanelKey, std::vector<const ConfigResult*>> panels;
  for (const ConfigResult& c : p.configs) {
    panels[{c.config.variant, c.config.precision, c.config.threads}].push_back(&c);
  }
  html += "<h4>config space (time of each config's screen; hover for the config and its outcome)</h4>\n";
  if (fastest > 0) html += internal::TimeLegendSvg(fmt::format("scale-{}", index), fastest, slowest);
  html += "<div class=\"variant-rows\">\n";
  for (Variant v : {Variant::kFused, Variant::kPartial, Variant::kMaterialized}) {
    std::string row;
    for (const auto& [key, configs] : panels) {
      if (std::get<0>(key) != v) continue;
      row += fmt::format("<figure class=\"panel\"><figcaption>{} · {} · t{}</figcaption>\n{}</figure>\n",
                         VariantName(v), PrecisionName(std::get<1>(key)), std::get<2>(key),
                         PanelSvg(configs, b.config_key, fastest, slowest));
    }
    if (row.empty()) continue;
    html += fmt::format("<div class=\"variant-row\" data-variant=\"{}\"><h5>{}</h5><div class=\"panels\">\n{}</div></div>\n",
                        VariantName(v), VariantName(v), row);
  }
  return html + "</div>\n</section>\n";
}

// A key escaped, with a line-break opportunity after each '/', so that long keys wrap in a
// narrow column instead of widening the table past the window.
std::string BreakableKey(const std::string& key) {
  std::string out;
  for (char c : HtmlEscape(key)) {
    out += c;
    if (c == '/') out += "<wbr/>";
  }
  return out;
}

std::string IndexTable(const TuningReport& r) {
  std::string html =
      "<table class=\"sortable index\">\n<thead><tr><th>device class</th><th>problem</th><th>kind</th>"
      "<th>pick</th><th>median µs</th><th>throughput</th><th>% of peak</th><th>vs materialized</th>"
      "<th>vs partial</th><th>audit regret %</th></tr></thead>\n<tbody>\n";
  for (const DeviceResults& d : r.devices) {
    for (const ProblemResult& p : d.problems) {
      const BestConfig& b = p.best;
      const Throughput t = ThroughputOf(d.device_class, b);
      absl::StatusOr<AttentionProblem> problem = AttentionProblem::FromKey(b.problem_key);
      html += fmt::format(
          "<tr><td>{}</td><td data-sort=\"{}\"><a href=\"#{}\">{}</a></td><td>{}</td><td class=\"key wrap\">{}</td>"
          "<td class=\"num\" data-sort=\"{}\">{}</td><td class=\"num\" data-sort=\"{}\">{}</td>"
          "<td class=\"num\" data-sort=\"{}\">{}</td><td class=\"num\" data-sort=\"{}\">{}</td>"
          "<td class=\"num\" data-sort=\"{}\">{}</td><td class=\"num\" data-sort=\"{}\">{}</td></tr>\n",
          HtmlEscape(d.device_class), HtmlEscape(b.problem_key), ProblemAnchor(d.device_class, b.problem_key),
          BreakableKey(b.problem_key), problem.ok() ? ProblemKindName(problem->kind) : "?", BreakableKey(b.config_key),
          b.median_us, FormatNumber(b.median_us, 4), t.known ? t.value : -1,
          t.known ? FormatNumber(t.value) + " " + t.unit : "-", t.percent_of_peak.value_or(-1),
          t.percent_of_peak ? fmt::format("{:.1f}", *t.percent_of_peak) : "unknown peak", b.speedup_vs_materialized,
          SpeedupText(b.speedup_vs_materialized), b.speedup_vs_partial, SpeedupText(b.speedup_vs_partial),
          p.audit ? 100 * p.audit->regret : -1,
          p.audit ? fmt::format("{:.2f} [{:.2f}, {:.2f}]", 100 * p.audit->regret, 100 * p.audit->regret_low,
                                100 * p.audit->regret_high)
                  : "-");
    }
  }
  return html + "</tbody>\n</table>\n";
}

std::string EnvironmentSection(const DeviceResults& d) {
  std::string html = "<h3>environment</h3>\n";
  std::set<int> clocks;
  for (const ProblemResult& p : d.problems) {
    if (p.best_sm_clock_mhz > 0) clocks.insert(p.best_sm_clock_mhz);
  }
  if (d.runs.empty()) return html + "<p class=\"note\">The picks name no stored run.</p>\n";
  html +=
      "<table class=\"env\">\n<thead><tr><th>run</th><th>commit</th><th>device</th><th>driver</th><th>max clock</th>"
      "<th>host</th><th>tool</th><th>environment</th><th>label</th><th>started (UTC)</th></tr></thead>\n<tbody>\n";
  for (const RunInfo& run : d.runs) {
    html += fmt::format(
        "<tr><td>{}</td><td class=\"key\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td class=\"key\">{}</td><td>{}</td><td>{}</td></tr>\n",
        run.run_id, HtmlEscape(run.commit), HtmlEscape(run.device.name), HtmlEscape(run.device.driver),
        run.device.max_clock_mhz > 0 ? fmt::format("{} MHz", run.device.max_clock_mhz) : "-", HtmlEscape(run.host),
        HtmlEscape(run.tool_version), HtmlEscape(run.environment), HtmlEscape(run.label),
        run.started_unix_ms > 0 ? FormatUtc(run.started_unix_ms, "%Y-%m-%d %H:%M") : "-");
  }
  html += "</tbody>\n</table>\n";
  std::string clock_text;
  for (int c : clocks) clock_text += (clock_text.empty() ? "" : ", ") + std::to_string(c) + " MHz";
  html += fmt::format("<p class=\"note clocks\">SM clock read during the picks' timing: {}.</p>\n",
                      clock_text.empty() ? "not read (this backend reports none)" : clock_text);
  return html;
}

}  // namespace

bool IsE4m3ProblemKey(const std::string& problem_key) {
  const std::string_view part = "/kve4m3";
  const size_t at = problem_key.find(part);
  return at != std::string::npos && (at + part.size() == problem_key.size() || problem_key[at + part.size()] == '/');
}

std::optional<double> PickUnquantisedRelError(const BestConfig& best, const std::vector<Trial>& trials) {
  if (!IsE4m3ProblemKey(best.problem_key)) return std::nullopt;
  std::optional<double> worst;
  for (const Trial& t : trials) {
    if (t.problem_key != best.problem_key || t.config_key != best.config_key) continue;
    if (t.outcome != TrialOutcome::kOk || t.checked_elements == 0) continue;  // verified ones
    worst = std::max(worst.value_or(0.0), t.unquantised_rel_error);
  }
  return worst;
}

absl::StatusOr<std::optional<double>> PickUnquantisedRelError(Store& store, const BestConfig& best) {
  if (!IsE4m3ProblemKey(best.problem_key)) return std::optional<double>();
  absl::StatusOr<std::vector<Trial>> trials =
      best.run_id > 0 ? store.ListTrials(best.run_id, best.problem_key)
                      : store.ListTrialsForProblem(best.device_class, best.problem_key, kTrialsWithoutRun);
  if (!trials.ok()) return trials.status();
  return PickUnquantisedRelError(best, *trials);
}

absl::StatusOr<TuningReport> ReadTuningReport(Store& store, const std::string& device_class,
                                              const std::string& source) {
  TuningReport report;
  report.source = source;
  absl::StatusOr<std::vector<BestConfig>> best = store.ListBestConfigs(device_class);
  if (!best.ok()) return best.status();
  std::sort(best->begin(), best->end(), [](const BestConfig& a, const BestConfig& b) {
    if (a.device_class != b.device_class) return a.device_class < b.device_class;
    return NaturalLess(a.problem_key, b.problem_key);
  });
  std::map<std::string, std::set<int64_t>> runs_of_device;
  for (BestConfig& b : *best) {
    if (report.devices.empty() || report.devices.back().device_class != b.device_class) {
      report.devices.push_back({b.device_class, {}, {}});
    }
    ProblemResult p;
    absl::StatusOr<std::vector<Trial>> trials =
        b.run_id > 0 ? store.ListTrials(b.run_id, b.problem_key)
                     : store.ListTrialsForProblem(b.device_class, b.problem_key, kTrialsWithoutRun);
    if (!trials.ok()) return trials.status();
    p.configs = ConfigResults(*trials);
    p.unquantised_rel_error = PickUnquantisedRelError(b, *trials);
    for (const Trial& t : *trials) {
      if (t.config_key == b.config_key && t.outcome == TrialOutcome::kOk && t.sm_clock_mhz > 0) {
        p.best_sm_clock_mhz = t.sm_clock_mhz;
      }
    }
    absl::StatusOr<std::vector<AuditSummary>> audits = store.ListAudits(b.device_class, b.problem_key, kAuditsSearched);
    if (!audits.ok()) return audits.status();
    for (AuditSummary& a : *audits) {
      if (a.recorded_config_key == b.config_key) {
        p.audit = std::move(a);
        break;
      }
    }
    if (b.run_id > 0) runs_of_device[b.device_class].insert(b.run_id);
    p.best = std::move(b);
    report.devices.back().problems.push_back(std::move(p));
  }
  for (DeviceResults& d : report.devices) {
    for (int64_t id : runs_of_device[d.device_class]) {
      absl::StatusOr<RunInfo> run = store.GetRun(id);
      if (absl::IsNotFound(run.status())) continue;
      if (!run.ok()) return run.status();
      d.runs.push_back(*std::move(run));
    }
  }
  return report;
}

std::string TuningReportHtml(const TuningReport& report) {
  std::string body;
  size_t problems = 0;
  for (const DeviceResults& d : report.devices) problems += d.problems.size();
  if (problems == 0) {
    body = "<p class=\"empty\">No best configs are recorded (run <code>fusetune sweep</code> first).</p>\n";
  } else {
    body = "<h2 id=\"index\">problems</h2>\n<p class=\"note\">Click a column's header to sort; a problem's name "
           "leads to its section.</p>\n" +
           IndexTable(report);
  }
  int index = 0;
  for (const DeviceResults& d : report.devices) {
    body += fmt::format("<h2 class=\"device\" id=\"{}\">device {}</h2>\n", AnchorId("device", d.device_class),
                        HtmlEscape(d.device_class));
    body += EnvironmentSection(d);
    for (const ProblemResult& p : d.problems) body += ProblemSection(d, p, index++);
  }
  return RenderPage({"fusetune tuning report",
                     fmt::format("{} problem(s) on {} device class(es), from {}", problems, report.devices.size(),
                                 report.source),
                     body});
}

}  // namespace fusetune::report
