#include "history_plot.h"

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

namespace fusetune::cli {
namespace {

// ---- A strict reader of the XML subset an SVG file uses: elements, attributes, text,
// comments, an optional <?xml ...?> declaration; character and the five predefined entity
// references. Anything not well-formed (unbalanced or mismatched tags, a raw '<' or '&' in
// text or an attribute, an unknown entity, a duplicate attribute, bad UTF-8, control
// characters, content after the root) is an error.

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attributes;  // values unescaped
  std::string text;                               // the element's own text, unescaped
  std::vector<XmlElement> children;

  std::string Attribute(const std::string& key) const {
    auto it = attributes.find(key);
    return it == attributes.end() ? "" : it->second;
  }
  double Number(const std::string& key) const { return std::strtod(Attribute(key).c_str(), nullptr); }
};

void AppendUtf8(unsigned code, std::string* out) {
  if (code < 0x80) {
    *out += static_cast<char>(code);
  } else if (code < 0x800) {
    *out += static_cast<char>(0xC0 | (code >> 6));
    *out += static_cast<char>(0x80 | (code & 0x3F));
  } else if (code < 0x10000) {
    *out += static_cast<char>(0xE0 | (code >> 12));
    *out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (code & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (code >> 18));
    *out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (code & 0x3F));
  }
}

bool ValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    if (n == 1 && c < 0x20 && c != '\t' && c != '\n' && c != '\r') return false;
    i += n;
  }
  return true;
}

class XmlReader {
 public:
  explicit XmlReader(std::string_view doc) : s_(doc) {}

  // The root element, or "" and *error set.
  bool Read(XmlElement* root, std::string* error) {
    if (!ValidUtf8(s_)) return Fail("not valid UTF-8 or holds control characters", error);
    if (s_.substr(0, 5) == "<?xml") {
      const size_t end = s_.find("?>");
      if (end == std::string_view::npos) return Fail("unterminated XML declaration", error);
      i_ = end + 2;
    }
    SkipMisc();
    if (!Element(root)) return Fail(error_, error);
    SkipMisc();
    if (i_ != s_.size()) return Fail("content after the root element", error);
    return true;
  }

 private:
  bool Fail(const std::string& why, std::string* error) {
    *error = fmt::format("{} (at byte {}: '{}')", why, i_, s_.substr(i_, 40));
    return false;
  }
  bool Err(const std::string& why) {
    error_ = why;
    return false;
  }
  bool Starts(std::string_view t) const { return s_.substr(i_, t.size()) == t; }
  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  void SkipMisc() {
    for (;;) {
      SkipSpace();
      if (!Starts("<!--")) return;
      const size_t end = s_.find("-->", i_ + 4);
      if (end == std::string_view::npos) return;
      i_ = end + 3;
    }
  }
  static bool NameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
  static bool NameChar(char c) {
    return NameStart(c) || std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-';
  }
  bool Name(std::string* name) {
    if (i_ >= s_.size() || !NameStart(s_[i_])) return Err("expected a name");
    const size_t from = i_;
    while (i_ < s_.size() && NameChar(s_[i_])) ++i_;
    *name = std::string(s_.substr(from, i_ - from));
    return true;
  }
  // Appends the unescaped `raw` (text or an attribute value) to *out.
  bool Unescape(std::string_view raw, std::string* out) {
    for (size_t k = 0; k < raw.size(); ++k) {
      if (raw[k] == '<') return Err("raw '<'");
      if (raw[k] != '&') {
        *out += raw[k];
        continue;
      }
      const size_t semi = raw.find(';', k);
      if (semi == std::string_view::npos) return Err("unterminated entity reference");
      const std::string_view ref = raw.substr(k + 1, semi - k - 1);
      static const std::map<std::string_view, char> kNamed = {
          {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
      if (auto it = kNamed.find(ref); it != kNamed.end()) {
        *out += it->second;
      } else if (ref.size() > 1 && ref[0] == '#') {
        const bool hex = ref[1] == 'x';
        const std::string digits(ref.substr(hex ? 2 : 1));
        if (digits.empty() || digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") !=
                                  std::string::npos) {
          return Err("bad character reference");
        }
        AppendUtf8(static_cast<unsigned>(std::strtoul(digits.c_str(), nullptr, hex ? 16 : 10)), out);
      } else {
        return Err("unknown entity &" + std::string(ref) + ";");
      }
      k = semi;
    }
    return true;
  }
  bool Element(XmlElement* e) {
    if (!Starts("<")) return Err("expected '<'");
    ++i_;
    if (!Name(&e->name)) return false;
    for (;;) {
      const size_t before = i_;
      SkipSpace();
      if (Starts("/>")) {
        i_ += 2;
        return true;
      }
      if (Starts(">")) {
        ++i_;
        break;
      }
      if (i_ == before) return Err("expected a space before an attribute");
      std::string key;
      if (!Name(&key)) return false;
      SkipSpace();
      if (!Starts("=")) return Err("expected '='");
      ++i_;
      SkipSpace();
      if (i_ >= s_.size() || (s_[i_] != '"' && s_[i_] != '\'')) return Err("expected a quoted value");
      const char quote = s_[i_++];
      const size_t end = s_.find(quote, i_);
      if (end == std::string_view::npos) return Err("unterminated attribute value");
      std::string value;
      if (!Unescape(s_.substr(i_, end - i_), &value)) return false;
      if (!e->attributes.emplace(key, value).second) return Err("duplicate attribute " + key);
      i_ = end + 1;
    }
    for (;;) {  // content
      const size_t lt = s_.find('<', i_);
      if (lt == std::string_view::npos) return Err("unterminated element " + e->name);
      const std::string_view text = s_.substr(i_, lt - i_);
      if (text.find("]]>") != std::string_view::npos) return Err("']]>' in text");
      if (!Unescape(text, &e->text)) return false;
      i_ = lt;
      if (Starts("<!--")) {
        const size_t end = s_.find("-->", i_ + 4);
        if (end == std::string_view::npos) return Err("unterminated comment");
        i_ = end + 3;
      } else if (Starts("</")) {
        i_ += 2;
        std::string name;
        if (!Name(&name)) return false;
        if (name != e->name) return Err("</" + name + "> closes <" + e->name + ">");
        SkipSpace();
        if (!Starts(">")) return Err("expected '>'");
        ++i_;
        return true;
      } else if (Starts("<!") || Starts("<?")) {
        return Err("unsupported markup");
      } else {
        e->children.emplace_back();
        if (!Element(&e->children.back())) return false;
      }
    }
  }

  std::string_view s_;
  size_t i_ = 0;
  std::string error_;
};

// The parsed SVG; fails the test when it is not well-formed XML.
XmlElement ParseSvg(const std::string& svg) {
  XmlElement root;
  std::string error;
  EXPECT_TRUE(XmlReader(svg).Read(&root, &error)) << error << "\n" << svg;
  EXPECT_EQ(root.name, "svg");
  EXPECT_EQ(root.Attribute("xmlns"), "http://www.w3.org/2000/svg");
  return root;
}

// The descendants of `e` named `name` (with class `cls` when not empty), in document order.
void Find(const XmlElement& e, const std::string& name, const std::string& cls, std::vector<const XmlElement*>* out) {
  for (const XmlElement& c : e.children) {
    if (c.name == name && (cls.empty() || c.Attribute("class") == cls)) out->push_back(&c);
    Find(c, name, cls, out);
  }
}
std::vector<const XmlElement*> Find(const XmlElement& e, const std::string& name, const std::string& cls = "") {
  std::vector<const XmlElement*> out;
  Find(e, name, cls, &out);
  return out;
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
}  // namespace fusetune::cli
