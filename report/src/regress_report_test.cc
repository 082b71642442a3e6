#include "fusetune/report/regress_report.h"

#include <memory>
#include <string>
#include <vector>

#include "fusetune/report/html.h"
#include "gtest/gtest.h"
#include "testing/report_fixtures.h"
#include "testing/xml_reader.h"

namespace fusetune::report {
namespace {

using testing::Find;
using testing::ParseXmlPage;
using testing::XmlElement;

constexpr char kProblem[] = "prefill/b1/hq2/hkv2/q64/k64/d32/causal0/fp32";

regress::CellComparison Cell(const std::string& config_key, regress::Verdict verdict, double ratio,
                             const std::string& why, double base_us, double cand_us) {
  regress::CellComparison c;
  c.cell.problem = *AttentionProblem::FromKey(kProblem);
  c.cell.config = *KernelConfig::FromKey(config_key);
  c.cell.role = "best";
  c.verdict.problem_key = kProblem;
  c.verdict.config_key = config_key;
  c.verdict.verdict = verdict;
  c.verdict.ratio.pairwise_ratio = ratio;
  c.verdict.ratio.lower = ratio * 0.98;
  c.verdict.ratio.upper = ratio * 1.02;
  c.verdict.floor = 0.03;
  c.verdict.why = why;
  c.verdict.baseline_blocks = 6;
  c.verdict.candidate_blocks = 6;
  c.verdict.accuracy.checked = true;
  for (int i = 0; i < 6; ++i) {
    c.baseline.blocks.push_back({10, base_us * (1 + 0.01 * i), {}, {}, false});
    c.candidate.blocks.push_back({10, cand_us * (1 + 0.01 * i), {}, {}, false});
  }
  c.baseline.check.tolerance = c.candidate.check.tolerance = 1e-4;
  return c;
}

RegressReport Report() {
  regress::Suite suite;
  suite.name = "tiny";
  regress::Comparison comparison;
  comparison.baseline.commit = "aaaaaaaa1111";
  comparison.candidate.commit = "bbbbbbbb2222";
  comparison.candidate.device.backend = comparison.baseline.device.backend = "cpu";
  comparison.candidate.device.name = comparison.baseline.device.name = "Test CPU";
  comparison.candidate.device.arch = comparison.baseline.device.arch = "x86_64-avx2";
  comparison.interleaved = true;
  comparison.cells.push_back(Cell("fused/bm16/bs16/t1/fp32/st1", regress::Verdict::kSame, 1.001, "inside the floor", 100, 100));
  comparison.cells.push_back(Cell("fused/bm32/bs16/t1/fp32/st1", regress::Verdict::kUnknown, 1.04,
                                  "the floor 12 % is wider than 10 %: <noise> of this host", 100, 104));
  comparison.cells.push_back(Cell("fused/bm64/bs16/t1/fp32/st1", regress::Verdict::kRegressed, 1.5, "slower", 100, 150));
  regress::CellComparison grew = Cell("fused/bm16/bs32/t1/fp32/st1", regress::Verdict::kSame, 1.0, "same", 80, 80);
  grew.verdict.accuracy.grew = true;
  grew.verdict.accuracy.growth = 4;
  grew.candidate.check.max_rel_error = 4e-5;
  comparison.cells.push_back(grew);
  RegressReport r = RegressReportFromComparison(suite, comparison, {"a note & more"}, false);
  r.history_href = "history.html";
  return r;
}

TEST(RegressReportHtml, ListsVerdictsMostSevereFirst) {
  const XmlElement root = ParseXmlPage(RegressReportHtml(Report()));
  const auto tables = Find(root, "table", "verdicts");
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_TRUE(tables[0]->HasClass("sortable"));
  std::vector<std::string> order;
  for (const XmlElement* row : Find(*tables[0], "tr")) {
    const auto cells = Find(*row, "td");
    if (!cells.empty()) order.push_back(cells[0]->text);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"regressed", "same", "unknown", "same"}));  // the grown error second
  // Each side as it reported itself; what it left empty is left out.
  const auto sides = Find(root, "dd");
  ASSERT_GE(sides.size(), 2u);
  EXPECT_EQ(sides[0]->text, "aaaaaaaa1111 on Test CPU");
  EXPECT_EQ(sides[1]->text, "bbbbbbbb2222 on Test CPU");
  const auto sections = Find(root, "section", "cell");
  ASSERT_EQ(sections.size(), 4u);
  EXPECT_NE(Find(*sections[0], "h3")[0]->AllText().find("fused/bm64/bs16"), std::string::npos);
}

TEST(RegressReportHtml, DrawsBothBuildsBlocksWithTheRatioFloorAndWhyUnknown) {
  const XmlElement root = ParseXmlPage(RegressReportHtml(Report()));
  const XmlElement* unknown =
      testing::FindId(root, CellAnchor(kProblem, "fused/bm32/bs16/t1/fp32/st1"));
  ASSERT_NE(unknown, nullptr);
  const auto strips = Find(*unknown, "svg", "strip");
  ASSERT_EQ(strips.size(), 1u);
  EXPECT_EQ(Find(*Find(*strips[0], "g", "side-baseline")[0], "circle", "block").size(), 6u);
  EXPECT_EQ(Find(*Find(*strips[0], "g", "side-candidate")[0], "circle", "block").size(), 6u);
  EXPECT_EQ(Find(*strips[0], "line", "median").size(), 2u);
  EXPECT_EQ(Find(*strips[0], "rect", "floor").size(), 1u);
  EXPECT_EQ(Find(*unknown, "dd", "ratio")[0]->text.substr(0, 24), "1.0400 [1.0192, 1.0608] ");
  EXPECT_EQ(Find(*unknown, "dd", "floor")[0]->text, "3.00 %");
  const auto dts = Find(*unknown, "dt");
  bool says_why = false;
  for (const XmlElement* dt : dts) says_why = says_why || dt->text == "why unknown";
  EXPECT_TRUE(says_why);
  EXPECT_EQ(Find(*unknown, "dd", "why")[0]->text, "the floor 12 % is wider than 10 %: <noise> of this host");
}

TEST(RegressReportHtml, ListsAccuracyFindingsAndLinksEachCellToItsHistory) {
  const std::string html = RegressReportHtml(Report());
  const XmlElement root = ParseXmlPage(html);
  const auto findings = Find(root, "ul", "accuracy-findings");
  ASSERT_EQ(findings.size(), 1u);
  ASSERT_EQ(Find(*findings[0], "li").size(), 1u);
  EXPECT_NE(Find(*findings[0], "li")[0]->AllText().find("grew 4.00×"), std::string::npos);
  const auto links = Find(root, "a", "history-link");
  ASSERT_EQ(links.size(), 4u);
  EXPECT_EQ(links[0]->Attribute("href"), "history.html#" + CellAnchor(kProblem, "fused/bm64/bs16/t1/fp32/st1"));
  EXPECT_EQ(html.find("a note & more"), std::string::npos);
  EXPECT_NE(html.find("a note &amp; more"), std::string::npos);
}

TEST(RegressReportHtml, IsTheSameBytesForTheSameData) {
  EXPECT_EQ(RegressReportHtml(Report()), RegressReportHtml(Report()));
  testing::WritePageIfAsked("regress.html", RegressReportHtml(Report()));
}

Regression Row(const std::string& commit, const std::string& baseline, const std::string& config,
               const std::string& metric, double ratio, const std::string& verdict) {
  Regression r;
  r.commit = commit;
  r.baseline_commit = baseline;
  r.device_class = testing::H200().DeviceClass();
  r.problem_key = testing::kStepCell;
  r.config_key = config;
  r.metric = metric;
  r.ratio = ratio;
  r.p_value = 0.004;
  r.verdict = verdict;
  return r;
}

TEST(ReadStoredRegressReport, TakesTheNewestComparisonOfTheCommitWithBothCommitsBlocks) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(":memory:");
  ASSERT_TRUE(store.ok());
  testing::FillHistoryStore(**store);
  const std::string commit = testing::NightCommit(11), baseline = testing::NightCommit(10);
  ASSERT_TRUE((*store)
                  ->RecordRegressions({Row(commit, testing::NightCommit(3), testing::kStepConfig, "latency", 1.2, "regressed"),
                                       Row(commit, baseline, testing::kStepConfig, "latency", 1.001, "same"),
                                       Row(commit, baseline, testing::kStepConfig, "max_rel_error", 3.5, "regressed"),
                                       Row(commit, baseline, testing::kFlatConfig, "latency", 1.01, "unknown"),
                                       Row(commit, commit, testing::kFlatConfig, "planted_latency", 2, "regressed")})
                  .ok());
  absl::StatusOr<RegressReport> r = ReadStoredRegressReport(**store, commit);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->from_store);
  EXPECT_EQ(r->baseline.commit, baseline);  // the newest rows' baseline
  EXPECT_EQ(r->suite, testing::kSuite);
  ASSERT_EQ(r->cells.size(), 2u);
  for (const RegressCell& c : r->cells) {
    EXPECT_EQ(c.baseline_us.size(), 6u) << c.name;
    EXPECT_EQ(c.candidate_us.size(), 6u) << c.name;
  }
  const XmlElement root = ParseXmlPage(RegressReportHtml(*r));
  const XmlElement* step = testing::FindId(root, CellAnchor(testing::kStepCell, testing::kStepConfig));
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(Find(*step, "dd", "ratio")[0]->text, "1.0010 (candidate / baseline, Hodges–Lehmann)");
  EXPECT_NE(Find(*step, "dd", "floor")[0]->text.find("not stored"), std::string::npos);
  EXPECT_NE(Find(*step, "dd", "accuracy-failed")[0]->text.find("grew 3.50×"), std::string::npos);
  EXPECT_TRUE(Find(*step, "rect", "floor").empty());  // no band for a floor that is not known
  EXPECT_EQ(Find(*step, "circle", "block").size(), 12u);
  EXPECT_TRUE(absl::IsNotFound(ReadStoredRegressReport(**store, testing::NightCommit(5)).status()));
}

}  // namespace
}  // namespace fusetune::report
