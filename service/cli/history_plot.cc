#include "history_plot.h"

#include <algorithm>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "fusetune/regress/junit.h"

namespace fusetune::cli {
namespace {

constexpr double kWidth = 900, kHeight = 400;
constexpr double kLeft = 70, kRight = 20, kTop = 40, kBottom = 40;

}  // namespace

std::string HistorySvg(const std::string& title, const std::vector<double>& values_us,
                       const std::vector<HistoryPlotChange>& changes) {
  double low = values_us.empty() ? 0 : *std::min_element(values_us.begin(), values_us.end());
  double high = values_us.empty() ? 1 : *std::max_element(values_us.begin(), values_us.end());
  if (high <= low) {  // a flat series: give it a band to sit in
    low -= 0.5;
    high += 0.5;
  }
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  const double last = std::max<double>(1, static_cast<double>(values_us.size()) - 1);
  auto x_of = [&](double i) { return kLeft + plot_w * i / last; };
  auto y_of = [&](double v) { return kTop + plot_h * (high - v) / (high - low); };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"20\" font-size=\"14\">{3}</text>\n",
      kWidth, kHeight, kLeft, regress::XmlEscape(title));
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>\n", kLeft, kTop,
                     kTop + plot_h);
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n", kLeft,
                     kTop + plot_h, kLeft + plot_w);
  svg += fmt::format("<text x=\"5\" y=\"{:.1f}\">{:.4g} us</text>\n", kTop + 4, high);
  svg += fmt::format("<text x=\"5\" y=\"{:.1f}\">{:.4g} us</text>\n", kTop + plot_h, low);
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">commits (oldest to newest), {} points</text>\n",
                     kLeft, kHeight - 10, values_us.size());
  for (const HistoryPlotChange& c : changes) {
    const double x = x_of(c.index - 0.5);
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"red\" stroke-dasharray=\"4 3\"/>\n"
        "<text x=\"{3:.1f}\" y=\"{4}\" fill=\"red\">{5}</text>\n",
        x, kTop, kTop + plot_h, x + 3, kTop + 12, regress::XmlEscape(c.label));
  }
  svg += "<polyline fill=\"none\" stroke=\"steelblue\" stroke-width=\"1.5\" points=\"";
  for (size_t i = 0; i < values_us.size(); ++i) {
    svg += fmt::format("{}{:.1f},{:.1f}", i == 0 ? "" : " ", x_of(static_cast<double>(i)), y_of(values_us[i]));
  }
  svg += "\"/>\n</svg>\n";
  return svg;
}

}  // namespace fusetune::cli
