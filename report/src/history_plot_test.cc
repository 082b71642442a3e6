#include "fusetune/report/history_plot.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"
#include "testing/xml_reader.h"

namespace fusetune::report {
namespace {

using testing::Find;
using testing::XmlElement;
using testing::XmlReader;

// The parsed SVG; fails the test when it is not well-formed XML.
XmlElement ParseSvg(const std::string& svg) {
  XmlElement root;
  std::string error;
  EXPECT_TRUE(XmlReader(svg).Read(&root, &error)) << error << "\n" << svg;
  EXPECT_EQ(root.name, "svg");
  EXPECT_EQ(root.Attribute("xmlns"), "http://www.w3.org/2000/svg");
  return root;
}

std::string Commit(int i) { return fmt::format("{:08x}{:032d}", 0xc0ffee00 + i, i); }

std::vector<HistoryPlotPoint> Series(int n, double base, double step_at_fraction = 2, double step = 0) {
  std::vector<HistoryPlotPoint> points;
  for (int i = 0; i < n; ++i) {
    points.push_back({Commit(i), base + 0.37 * std::sin(i) + (i >= step_at_fraction * n ? step : 0)});
  }
  return points;
}

// The series index whose point is drawn at x (its circle's cx); -1 if none.
int PointAt(const XmlElement& svg, double x) {
  const std::vector<const XmlElement*> circles = Find(svg, "circle");
  for (size_t i = 0; i < circles.size(); ++i) {
    if (std::abs(circles[i]->Number("cx") - x) < 0.05) return static_cast<int>(i);
  }
  return -1;
}

constexpr char kMicro[] = "\xC2\xB5s";  // "µs"

TEST(XmlReader, RejectsWhatIsNotWellFormed) {
  for (const std::string bad : {"<svg><text>a & b</text></svg>", "<svg><text>a < b</text></svg>",
                                "<svg><g></text></svg>", "<svg x=\"<\"/>", "<svg x=\"1\" x=\"2\"/>",
                                "<svg><text>&micro;</text></svg>", "<svg/><svg/>", "<svg>", "<svg x=1/>",
                                "<svg>\xC2</svg>", "<svg>\x01</svg>"}) {
    XmlElement root;
    std::string error;
    EXPECT_FALSE(XmlReader(bad).Read(&root, &error)) << bad;
  }
  XmlElement root;
  std::string error;
  ASSERT_TRUE(XmlReader("<?xml version=\"1.0\"?>\n<svg a='&lt;&#181;&#xB5;'><!-- c --><t>x &amp; y</t>z</svg>\n")
                  .Read(&root, &error))
      << error;
  EXPECT_EQ(root.Attribute("a"), "<\xC2\xB5\xC2\xB5");
  ASSERT_EQ(root.children.size(), 1u);
  EXPECT_EQ(root.children[0].text, "x & y");
  EXPECT_EQ(root.text, "z");
}

// ---- the chart

TEST(HistorySvg, IsWellFormedXmlWithItsTextEscaped) {
  std::vector<HistoryPlotPoint> points = Series(5, 100);
  points[2].commit = "a<b>&\"c'";
  const std::string title = "prefill/<q&k> \"fused\" 'suite'";
  const XmlElement svg = ParseSvg(HistorySvg(title, points, {{2, points[2].commit, 0.031}}));
  const std::vector<const XmlElement*> texts = Find(svg, "text");
  ASSERT_FALSE(texts.empty());
  EXPECT_EQ(texts[0]->text, title);  // unescaped by the reader: the same text
  std::vector<const XmlElement*> labels = Find(svg, "text", "change-label");
  ASSERT_EQ(labels.size(), 1u);
  EXPECT_EQ(labels[0]->text, "a<b>&\"c' +3.1 %");
  // Empty and one-point series are valid too.
  ParseSvg(HistorySvg("empty", {}, {}));
  ParseSvg(HistorySvg("one", {{Commit(0), 42.0}}, {}));
}

TEST(HistorySvg, LabelsEveryCommitOnTheXAxisWhenTheyFit) {
  const std::vector<HistoryPlotPoint> points = Series(8, 100);
  const XmlElement svg = ParseSvg(HistorySvg("t", points, {}));
  const std::vector<const XmlElement*> labels = Find(svg, "text", "x-label");
  ASSERT_EQ(labels.size(), points.size());
  for (size_t k = 0; k < labels.size(); ++k) {
    const int i = PointAt(svg, labels[k]->Number("x"));
    EXPECT_EQ(i, static_cast<int>(k)) << "the label of point " << k << " is not under it";
    EXPECT_EQ(labels[k]->text, points[k].commit.substr(0, 12));
    EXPECT_EQ(labels[k]->Attribute("transform"), "");  // horizontal
    if (k > 0) {  // 12 characters of about 6.5 px at font-size 11 do not reach the next label
      EXPECT_GE(labels[k]->Number("x") - labels[k - 1]->Number("x"), 12 * 6.5);
    }
  }
}

TEST(HistorySvg, ManyPointsGetThinnedRotatedLabelsThatDoNotOverlap) {
  for (int n : {40, 120, 500}) {
    SCOPED_TRACE(n);
    const std::vector<HistoryPlotPoint> points = Series(n, 250);
    const XmlElement svg = ParseSvg(HistorySvg("t", points, {}));
    EXPECT_EQ(Find(svg, "circle").size(), points.size());
    const std::vector<const XmlElement*> labels = Find(svg, "text", "x-label");
    ASSERT_GE(labels.size(), 10u);
    ASSERT_LE(labels.size(), points.size());
    for (size_t k = 0; k < labels.size(); ++k) {
      const int i = PointAt(svg, labels[k]->Number("x"));
      ASSERT_GE(i, 0) << "a label at x " << labels[k]->Number("x") << " with no point";
      EXPECT_EQ(labels[k]->text, points[i].commit.substr(0, 12));
      EXPECT_NE(labels[k]->Attribute("transform").find("rotate("), std::string::npos);
      // Rotated by 45 degrees, labels 16 px apart on the axis are 11 px apart across: one
      // line of font-size 11.
      if (k > 0) EXPECT_GE(labels[k]->Number("x") - labels[k - 1]->Number("x"), 15.5);
    }
    EXPECT_EQ(labels.back()->text, points.back().commit.substr(0, 12));  // the newest is labelled
  }
}

TEST(HistorySvg, YAxisHasTicksAtRoundValuesWithGridLinesInMicroseconds) {
  const std::vector<HistoryPlotPoint> points = {{Commit(0), 101.3}, {Commit(1), 104.0}, {Commit(2), 107.9}};
  const XmlElement svg = ParseSvg(HistorySvg("t", points, {}));
  const std::vector<const XmlElement*> ticks = Find(svg, "text", "y-tick");
  const std::vector<const XmlElement*> grid = Find(svg, "line", "grid");
  ASSERT_GE(ticks.size(), 3u);
  ASSERT_LE(ticks.size(), 8u);
  ASSERT_EQ(grid.size(), ticks.size());
  std::vector<double> values;
  for (const XmlElement* t : ticks) {
    const size_t unit = t->text.find(std::string(" ") + kMicro);
    ASSERT_NE(unit, std::string::npos) << t->text;
    EXPECT_EQ(unit + 1 + std::string(kMicro).size(), t->text.size()) << t->text;
    values.push_back(std::strtod(t->text.substr(0, unit).c_str(), nullptr));
  }
  std::sort(values.begin(), values.end());
  const double step = values[1] - values[0];
  const double magnitude = std::pow(10.0, std::floor(std::log10(step)));
  const double mantissa = step / magnitude;
  EXPECT_TRUE(std::abs(mantissa - 1) < 1e-9 || std::abs(mantissa - 2) < 1e-9 || std::abs(mantissa - 2.5) < 1e-9 ||
              std::abs(mantissa - 5) < 1e-9)
      << "step " << step;
  for (size_t k = 0; k < values.size(); ++k) {
    EXPECT_NEAR(values[k], values[0] + step * static_cast<double>(k), 1e-9);
    EXPECT_NEAR(std::remainder(values[k], step), 0, 1e-9) << values[k] << " is not a multiple of " << step;
  }
  EXPECT_LE(values.front(), 101.3);
  EXPECT_GE(values.back(), 107.9);
  // Each label sits at its grid line, and the points are drawn on the same scale.
  std::vector<double> grid_y;
  for (const XmlElement* g : grid) grid_y.push_back(g->Number("y1"));
  const double y_per_us = (grid_y.front() - grid_y.back()) / (values.back() - values.front());
  ASSERT_GT(y_per_us, 0);
  const std::vector<const XmlElement*> circles = Find(svg, "circle");
  ASSERT_EQ(circles.size(), points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    EXPECT_NEAR(circles[i]->Number("cy"), grid_y.front() - (points[i].median_us - values.front()) * y_per_us, 0.25);
  }
}

TEST(HistorySvg, TheChangePointCarriesItsFullCommit) {
  const std::vector<HistoryPlotPoint> points = Series(30, 100, 0.5, 5);
  for (const std::string commit : {points[15].commit, std::string("c0ffee123456"), std::string("abc1234")}) {
    SCOPED_TRACE(commit);
    const XmlElement svg = ParseSvg(HistorySvg("t", points, {{15, commit, 0.05}}));
    const std::vector<const XmlElement*> labels = Find(svg, "text", "change-label");
    ASSERT_EQ(labels.size(), 1u);
    EXPECT_EQ(labels[0]->text, commit + " +5.0 %");
    // The marker lies between the last point before the change and the first after it.
    const std::vector<const XmlElement*> lines = Find(svg, "line", "change");
    ASSERT_EQ(lines.size(), 1u);
    const std::vector<const XmlElement*> circles = Find(svg, "circle");
    EXPECT_GT(lines[0]->Number("x1"), circles[14]->Number("cx"));
    EXPECT_LT(lines[0]->Number("x1"), circles[15]->Number("cx"));
    // Each point's tooltip has its full commit.
    EXPECT_EQ(Find(*circles[15], "title")[0]->text.rfind(points[15].commit + " ", 0), 0u);
  }
}

TEST(HistorySvg, AChangeLabelNearTheRightEdgeStaysOnTheChart) {
  const std::vector<HistoryPlotPoint> points = Series(30, 100, 0.9, 5);
  const XmlElement svg = ParseSvg(HistorySvg("t", points, {{27, points[27].commit, 0.05}}));
  const std::vector<const XmlElement*> labels = Find(svg, "text", "change-label");
  ASSERT_EQ(labels.size(), 1u);
  EXPECT_EQ(labels[0]->Attribute("text-anchor"), "end");
  EXPECT_LT(labels[0]->Number("x"), Find(svg, "line", "change")[0]->Number("x1"));
}

// ---- the ticks

TEST(NiceTicks, RoundStepsCoveringTheRange) {
  struct Case {
    double low, high, step, first, last;
  };
  for (const Case& c : std::vector<Case>{{101.3, 107.9, 2, 100, 108},
                                         {0.3, 9.7, 2, 0, 10},
                                         {99.5, 100.5, 0.2, 99.4, 100.6},
                                         {1234, 1299, 20, 1220, 1300},
                                         {0.0012, 0.0024, 0.00025, 0.001, 0.0025},
                                         {10, 20, 2, 10, 20}}) {
    SCOPED_TRACE(fmt::format("[{}, {}]", c.low, c.high));
    const AxisTicks t = NiceTicks(c.low, c.high);
    EXPECT_NEAR(t.step, c.step, 1e-12);
    ASSERT_GE(t.values.size(), 4u);
    EXPECT_LE(t.values.size(), 8u);
    EXPECT_NEAR(t.values.front(), c.first, 1e-9);
    EXPECT_NEAR(t.values.back(), c.last, 1e-9);
  }
  EXPECT_EQ(NiceTicks(0, 10).decimals, 0);
  EXPECT_EQ(NiceTicks(99.5, 100.5).decimals, 1);
  EXPECT_EQ(NiceTicks(0.0012, 0.0024).decimals, 5);
}

TEST(NiceTicks, FourToSevenTicksOverManyRanges) {
  for (double low = 0.37; low < 5000; low *= 1.9) {
    for (double span = 0.013; span < 3000; span *= 1.37) {
      const AxisTicks t = NiceTicks(low, low + span);
      ASSERT_GE(t.values.size(), 4u) << low << " " << span;
      ASSERT_LE(t.values.size(), 7u) << low << " " << span;
      ASSERT_LE(t.values.front(), low + 1e-9 * span);
      ASSERT_GE(t.values.back(), low + span - 1e-9 * span);
    }
  }
}

}  // namespace
}  // namespace fusetune::report
