#include "fusetune/report/history_plot.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "fusetune/regress/junit.h"

namespace fusetune::report {
namespace {

constexpr double kWidth = 900, kHeight = 460;
// The plot area's margins: the y tick labels on the left, room for half a commit label on
// the right, the change labels above, the commit labels and the axis title below (rotated
// labels need more).
constexpr double kLeft = 90, kRight = 50, kTop = 66, kBottom = 55, kBottomRotated = 110;
constexpr double kCharWidth = 7;       // about one digit at font-size 11, sans-serif
constexpr size_t kCommitChars = 12;    // the commit form of the x labels (and the history table)
constexpr double kLabelGap = 12;       // between two horizontal commit labels
constexpr double kRotatedPitch = 16;   // the least x distance between two rotated commit labels
constexpr int kChangeLabelRows = 3;    // change labels are staggered over this many rows

std::string Escaped(const std::string& text) { return regress::XmlEscape(text); }

// Characters as a reader counts them: UTF-8 code points (continuation bytes not counted).
size_t DisplayWidth(const std::string& text) {
  size_t width = 0;
  for (char c : text) width += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return width;
}

}  // namespace

AxisTicks NiceTicks(double low, double high) {
  AxisTicks t;
  const double raw = (high - low) / 5;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  t.step = 10 * magnitude;
  for (double m : {1.0, 2.0, 2.5, 5.0}) {
    if (m * magnitude >= raw * (1 - 1e-9)) {
      t.step = m * magnitude;
      break;
    }
  }
  // A relative tolerance, so that a bound that is a multiple of the step up to rounding gets
  // no extra tick.
  const double first = std::floor(low / t.step + 1e-9);
  const double last = std::ceil(high / t.step - 1e-9);
  for (double k = first; k <= last + 0.5; k += 1) t.values.push_back(k * t.step);
  while (t.decimals < 15) {
    const double scaled = t.step * std::pow(10.0, t.decimals);
    if (std::abs(scaled - std::round(scaled)) <= 1e-6 * scaled) break;
    ++t.decimals;
  }
  return t;
}

std::string HistorySvg(const std::string& title, const std::vector<HistoryPlotPoint>& points,
                       const std::vector<HistoryPlotChange>& changes) {
  double low = 0, high = 1;
  bool any = false;
  for (const HistoryPlotPoint& p : points) {
    if (!std::isfinite(p.median_us)) continue;
    low = any ? std::min(low, p.median_us) : p.median_us;
    high = any ? std::max(high, p.median_us) : p.median_us;
    any = true;
  }
  if (high <= low) {  // a flat series: give it a band to sit in
    const double band = std::max(0.5, 0.02 * std::abs(low));
    low -= band;
    high += band;
  }
  const AxisTicks ticks = NiceTicks(low, high);
  const double y_low = ticks.values.front(), y_high = ticks.values.back();
  const size_t n = points.size();
  const double plot_w = kWidth - kLeft - kRight;
  // A commit label per point while they fit side by side; else rotated, and only every
  // `every`-th point's (counted from the newest, which is always labelled).
  const double spacing = n > 1 ? plot_w / static_cast<double>(n - 1) : plot_w;
  const bool rotated = spacing < kCommitChars * kCharWidth + kLabelGap;
  const size_t every = rotated ? static_cast<size_t>(std::ceil(kRotatedPitch / spacing)) : 1;
  const double plot_h = kHeight - kTop - (rotated ? kBottomRotated : kBottom);
  const double plot_bottom = kTop + plot_h;
  const double last = std::max<double>(1, static_cast<double>(n) - 1);
  auto x_of = [&](double i) { return kLeft + plot_w * i / last; };
  auto y_of = [&](double v) { return kTop + plot_h * (y_high - v) / (y_high - y_low); };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"20\" font-size=\"14\">{3}</text>\n",
      kWidth, kHeight, kLeft, Escaped(title));

  // The y axis: grid lines and labels at round values.
  for (double v : ticks.values) {
    const double y = y_of(v);
    svg += fmt::format(
        "<line class=\"grid\" x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#dddddd\"/>\n"
        "<line x1=\"{3}\" y1=\"{1:.1f}\" x2=\"{0}\" y2=\"{1:.1f}\" stroke=\"black\"/>\n"
        "<text class=\"y-tick\" x=\"{4}\" y=\"{5:.1f}\" text-anchor=\"end\">{6:.{7}f} µs</text>\n",
        kLeft, y, kLeft + plot_w, kLeft - 4, kLeft - 7, y + 4, v, ticks.decimals);
  }
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>\n", kLeft, kTop,
                     plot_bottom);
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n", kLeft, plot_bottom,
                     kLeft + plot_w);

  // The x axis: the commit labels.
  for (size_t i = 0; i < n; ++i) {
    if ((n - 1 - i) % every != 0) continue;
    const double x = x_of(static_cast<double>(i));
    const std::string label = Escaped(points[i].commit.substr(0, kCommitChars));
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"black\"/>\n", x,
                       plot_bottom, plot_bottom + 4);
    if (rotated) {
      svg += fmt::format(
          "<text class=\"x-label\" x=\"{0:.1f}\" y=\"{1}\" text-anchor=\"end\" "
          "transform=\"rotate(-45 {0:.1f} {1})\">{2}</text>\n",
          x, plot_bottom + 12, label);
    } else {
      svg += fmt::format("<text class=\"x-label\" x=\"{0:.1f}\" y=\"{1}\" text-anchor=\"middle\">{2}</text>\n", x,
                         plot_bottom + 17, label);
    }
  }
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">commit (oldest to newest), {} points{}</text>\n",
                     kLeft + plot_w / 2, kHeight - 8, n,
                     every > 1 ? fmt::format(", a label every {} points", every) : "");

  // Change points: a dashed line between the last point before and the first after, labelled
  // with the commit in full and the change, on the side where the label fits.
  for (size_t k = 0; k < changes.size(); ++k) {
    const HistoryPlotChange& c = changes[k];
    const double x = std::clamp(x_of(c.index - 0.5), kLeft, kLeft + plot_w);
    const double y = kTop - 6 - 13.0 * static_cast<double>(k % kChangeLabelRows);
    const std::string label = fmt::format("{} {:+.1f} %", c.commit, 100 * c.relative_change);
    const bool fits_right = x + 4 + static_cast<double>(DisplayWidth(label)) * kCharWidth <= kWidth - 4;
    svg += fmt::format(
        "<line class=\"change\" x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"red\" "
        "stroke-dasharray=\"4 3\"/>\n"
        "<text class=\"change-label\" x=\"{3:.1f}\" y=\"{1}\" text-anchor=\"{4}\" fill=\"red\">{5}</text>\n",
        x, y, plot_bottom, fits_right ? x + 4 : x - 4, fits_right ? "start" : "end", Escaped(label));
  }

  // The series, and each point with its full commit and median as a tooltip.
  svg += "<polyline fill=\"none\" stroke=\"steelblue\" stroke-width=\"1.5\" points=\"";
  bool first = true;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(points[i].median_us)) continue;
    svg += fmt::format("{}{:.1f},{:.1f}", first ? "" : " ", x_of(static_cast<double>(i)), y_of(points[i].median_us));
    first = false;
  }
  svg += "\"/>\n";
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(points[i].median_us)) continue;
    svg += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"steelblue\"><title>{} {:.3f} µs{}</title></circle>\n",
        x_of(static_cast<double>(i)), y_of(points[i].median_us), Escaped(points[i].commit), points[i].median_us,
        points[i].detail.empty() ? "" : "\n" + Escaped(points[i].detail));
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace fusetune::report
