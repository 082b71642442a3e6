#include "heatmap.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "fmt/format.h"
#include "fusetune/report/html.h"

namespace fusetune::report::internal {
namespace {

struct Rgb {
  double r, g, b;
};
// A diverging scale readable by most colour-blind readers at these three stops.
constexpr Rgb kFast{26, 152, 80}, kMiddle{254, 224, 139}, kSlow{215, 48, 39};

Rgb Mix(Rgb a, Rgb b, double t) { return {a.r + (b.r - a.r) * t, a.g + (b.g - a.g) * t, a.b + (b.b - a.b) * t}; }

std::string Hex(Rgb c) {
  return fmt::format("#{:02x}{:02x}{:02x}", static_cast<int>(std::lround(c.r)), static_cast<int>(std::lround(c.g)),
                     static_cast<int>(std::lround(c.b)));
}

}  // namespace

std::string TimeColour(double us, double fastest_us, double slowest_us) {
  if (!(us > 0) || !(fastest_us > 0) || !(slowest_us >= fastest_us) || !std::isfinite(us)) return "#888888";
  // Log scale: a config twice as slow is as far from the best wherever the best is.
  const double span = std::log(slowest_us / fastest_us);
  const double t = span > 0 ? std::clamp(std::log(us / fastest_us) / span, 0.0, 1.0) : 0.0;
  return Hex(t < 0.5 ? Mix(kFast, kMiddle, 2 * t) : Mix(kMiddle, kSlow, 2 * t - 1));
}

std::string TimeLegendSvg(const std::string& id, double fastest_us, double slowest_us) {
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"legend\" width=\"560\" height=\"40\" "
      "viewBox=\"0 0 560 40\" font-size=\"11\">\n"
      "<defs><linearGradient id=\"{0}\"><stop offset=\"0\" stop-color=\"{1}\"/><stop offset=\"0.5\" "
      "stop-color=\"{2}\"/><stop offset=\"1\" stop-color=\"{3}\"/></linearGradient></defs>\n"
      "<rect x=\"0\" y=\"4\" width=\"160\" height=\"12\" fill=\"url(#{0})\" stroke=\"#999999\"/>\n"
      "<text x=\"0\" y=\"30\">{4} µs (fastest)</text>\n"
      "<text x=\"160\" y=\"30\" text-anchor=\"end\">{5} µs</text>\n",
      id, Hex(kFast), Hex(kMiddle), Hex(kSlow), FormatNumber(fastest_us), FormatNumber(slowest_us));
  svg +=
      "<rect x=\"190\" y=\"4\" width=\"14\" height=\"12\" fill=\"#f2f2f2\" stroke=\"#bbbbbb\"/>"
      "<text x=\"197\" y=\"14\" text-anchor=\"middle\" font-size=\"9\" fill=\"#777777\">u</text>"
      "<text x=\"208\" y=\"14\">unsupported</text>\n"
      "<rect x=\"290\" y=\"4\" width=\"14\" height=\"12\" fill=\"#444444\"/>"
      "<text x=\"297\" y=\"14\" text-anchor=\"middle\" font-size=\"9\" fill=\"#ffffff\">✕</text>"
      "<text x=\"308\" y=\"14\">failed (launch, verify, time-out, memory)</text>\n"
      "<rect x=\"190\" y=\"22\" width=\"14\" height=\"12\" fill=\"#ffffff\" stroke=\"#000000\" stroke-width=\"2.5\"/>"
      "<text x=\"208\" y=\"32\">the pick</text>\n"
      "<rect x=\"290\" y=\"22\" width=\"14\" height=\"12\" fill=\"#ffffff\" stroke=\"#bbbbbb\" "
      "stroke-dasharray=\"2 2\"/><text x=\"308\" y=\"32\">interrupted (not measured to the end)</text>\n"
      "</svg>\n";
  return svg;
}

}  // namespace fusetune::report::internal
