#include "fusetune/regress/junit.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace fusetune::regress {
namespace {

size_t Count(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

CellVerdict Verdicted(std::string problem, std::string config, Verdict verdict, double ratio) {
  CellVerdict v;
  v.problem_key = std::move(problem);
  v.config_key = std::move(config);
  v.verdict = verdict;
  v.ratio.ratio = v.ratio.pairwise_ratio = ratio;
  v.ratio.lower = ratio * 0.99;
  v.ratio.upper = ratio * 1.01;
  v.p_slower = 0.001;
  v.p_slower_adjusted = 0.004;
  v.baseline_blocks = v.candidate_blocks = 10;
  v.why = "why <&>";
  return v;
}

std::vector<CellVerdict> Sample() {
  std::vector<CellVerdict> verdicts = {
      Verdicted("p/same", "c1", Verdict::kSame, 1.001),
      Verdicted("p/small", "c2", Verdict::kRegressed, 1.03),
      Verdicted("p/<odd>&\"name'", "c3", Verdict::kUnknown, 1.01),
      Verdicted("p/big", "c4", Verdict::kRegressed, 1.20),
      Verdicted("p/faster", "c5", Verdict::kImproved, 0.9),
      Verdicted("p/acc", "c6|pipe", Verdict::kSame, 1.0),
  };
  verdicts[5].accuracy.checked = true;
  verdicts[5].accuracy.failed = true;
  return verdicts;
}

TEST(XmlEscape, EscapesTheFiveSpecialCharactersAndControlCharacters) {
  EXPECT_EQ(XmlEscape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
  EXPECT_EQ(XmlEscape(std::string("x\x01y\tz", 5)), "x?y\tz");
}

TEST(WriteJUnitXml, ItsRatioIsTheRatioTheMarkdownShows) {
  // The ratio of medians and the pairwise (Hodges–Lehmann) ratio differ on skewed blocks; a
  // cell must not show one number in JUnit and another in markdown under the same name.
  CellVerdict v = Verdicted("p/skewed", "c1", Verdict::kImproved, 0.9865);
  v.ratio.ratio = 0.932;
  const std::string xml = WriteJUnitXml("s", {v});
  const std::string markdown = WriteMarkdownReport("t", {v});
  EXPECT_NE(xml.find("<property name=\"ratio\" value=\"0.9865\"/>"), std::string::npos) << xml;
  EXPECT_NE(markdown.find("0.9865"), std::string::npos) << markdown;
  EXPECT_NE(xml.find("<property name=\"ratio_of_medians\" value=\"0.932\"/>"), std::string::npos) << xml;
  EXPECT_EQ(markdown.find("0.932"), std::string::npos) << markdown;
}

TEST(WriteJUnitXml, OneTestCasePerCellWithFailuresAndSkips) {
  const std::string xml = WriteJUnitXml("suite <cpu>", Sample());
  EXPECT_EQ(xml.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", 0), 0u);
  EXPECT_EQ(Count(xml, "<testcase "), 6u);
  EXPECT_EQ(Count(xml, "</testcase>"), 6u);
  EXPECT_EQ(Count(xml, "<failure "), 3u);  // two regressions and one accuracy failure
  EXPECT_EQ(Count(xml, "</failure>"), 3u);
  EXPECT_EQ(Count(xml, "<skipped "), 1u);
  EXPECT_EQ(Count(xml, "<testsuite "), 1u);
  EXPECT_EQ(Count(xml, "</testsuite>"), 1u);
  EXPECT_NE(xml.find("tests=\"6\" failures=\"3\" errors=\"0\" skipped=\"1\""), std::string::npos);
  EXPECT_NE(xml.find("type=\"accuracy\""), std::string::npos);
  EXPECT_NE(xml.find("name=\"suite &lt;cpu&gt;\""), std::string::npos);
  EXPECT_NE(xml.find("name=\"p/&lt;odd&gt;&amp;&quot;name&apos; c3\""), std::string::npos);
  EXPECT_NE(xml.find("<property name=\"ratio\" value=\"1.2\"/>"), std::string::npos);
  EXPECT_NE(xml.find("<property name=\"ci_lower\""), std::string::npos);
  EXPECT_NE(xml.find("<property name=\"p_slower_adjusted\" value=\"0.004\"/>"), std::string::npos);
  EXPECT_NE(xml.find(">why &lt;&amp;&gt;</failure>"), std::string::npos);
  // Well-formed enough: every '<' opens a tag (raw text never holds one), every '&' an entity.
  EXPECT_EQ(Count(xml, "<"), Count(xml, ">"));
  for (size_t at = xml.find('&'); at != std::string::npos; at = xml.find('&', at + 1)) {
    const std::string rest = xml.substr(at, 6);
    EXPECT_TRUE(rest.rfind("&amp;", 0) == 0 || rest.rfind("&lt;", 0) == 0 ||
                rest.rfind("&gt;", 0) == 0 || rest.rfind("&quot;", 0) == 0 ||
                rest.rfind("&apos;", 0) == 0)
        << rest;
  }
  EXPECT_EQ(xml.find("<odd>"), std::string::npos);
}

TEST(WriteMarkdownReport, SortsBySeverityThenRatio) {
  const std::string md = WriteMarkdownReport("Regressions", Sample());
  const size_t big = md.find("p/big"), small = md.find("p/small"), acc = md.find("p/acc"),
               unknown = md.find("p/&lt;odd&gt;"), faster = md.find("p/faster"),
               same = md.find("p/same");
  ASSERT_NE(big, std::string::npos);
  ASSERT_NE(unknown, std::string::npos);
  EXPECT_LT(big, small);
  EXPECT_LT(small, acc);
  EXPECT_LT(acc, unknown);
  EXPECT_LT(unknown, faster);
  EXPECT_LT(faster, same);
  EXPECT_NE(md.find("c6\\|pipe"), std::string::npos);
  EXPECT_NE(md.find("6 cells: 2 regressed, 1 improved, 2 same, 1 unknown; 1 with an accuracy"),
            std::string::npos);
  EXPECT_NE(md.find("[1.1880, 1.2120] (90 %)"), std::string::npos);
  // Header, separator and one row per cell.
  EXPECT_EQ(Count(md, "\n| "), 7u);
}

TEST(WriteMarkdownReport, ShowsEachFloorAndWhyEachUnknownCellIsUnknown) {
  std::vector<CellVerdict> verdicts = Sample();
  verdicts[0].floor = 0.015;
  verdicts[2].floor = 0.25;
  verdicts[2].why = "cannot resolve on this host: the floor 25.00% is wider than the 10.00% a \"same\" may hide";
  const std::string md = WriteMarkdownReport("Regressions", verdicts);
  EXPECT_NE(md.find("| 1.50 % |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 25.00 % |"), std::string::npos) << md;
  const size_t why = md.find("Why unknown:");
  ASSERT_NE(why, std::string::npos) << md;
  EXPECT_NE(md.find("- p/&lt;odd&gt;&\"name' c3: cannot resolve on this host", why), std::string::npos) << md;
  // Only unknown cells get a reason below the table.
  EXPECT_EQ(md.find("why &lt;&&gt;", why), std::string::npos) << md;
  verdicts[2].verdict = Verdict::kSame;
  EXPECT_EQ(WriteMarkdownReport("Regressions", verdicts).find("Why unknown:"), std::string::npos);
}

}  // namespace
}  // namespace fusetune::regress
