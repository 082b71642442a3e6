#include "fusetune/report/history_report.h"

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

std::unique_ptr<Store> HistoryStore() {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(":memory:");
  EXPECT_TRUE(store.ok()) << store.status();
  testing::FillHistoryStore(**store);
  return *std::move(store);
}

TEST(HistoryReport, ReadsEveryCellOfTheSuiteWithItsChangePoints) {
  std::unique_ptr<Store> store = HistoryStore();
  absl::StatusOr<HistoryReport> r = ReadHistoryReport(*store, {testing::kSuite, "", "", ""}, "test.db");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->cells.size(), 2u);
  EXPECT_EQ(r->cells[0].history.config_key, testing::kStepConfig);  // fused before materialized
  ASSERT_EQ(r->cells[0].changes.change_points.size(), 1u);
  EXPECT_EQ(r->cells[0].changes.change_points[0].commit, testing::NightCommit(6));
  EXPECT_TRUE(r->cells[1].changes.change_points.empty());
  EXPECT_EQ(r->cells[0].sm_clock_range_mhz[0], (std::pair<int, int>{1740, 1755}));
}

TEST(HistoryReport, OneCellOrAnUnknownCellOrNoRuns) {
  std::unique_ptr<Store> store = HistoryStore();
  absl::StatusOr<HistoryReport> one =
      ReadHistoryReport(*store, {testing::kSuite, "", testing::kStepCell, testing::kFlatConfig}, "test.db");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->cells.size(), 1u);
  EXPECT_EQ(one->cells[0].history.config_key, testing::kFlatConfig);
  EXPECT_TRUE(absl::IsInvalidArgument(
      ReadHistoryReport(*store, {testing::kSuite, "", "prefill/b9/hq2/hkv2/q64/k64/d32/causal0/fp32", ""}, "x")
          .status()));
  EXPECT_TRUE(absl::IsNotFound(ReadHistoryReport(*store, {"no-such-suite", "", "", ""}, "x").status()));
}

TEST(HistoryReportHtml, MarksChangePointsAndHoversWithCommitDateAndClocks) {
  std::unique_ptr<Store> store = HistoryStore();
  HistoryReport r = *ReadHistoryReport(*store, {testing::kSuite, "", "", ""}, "test.db");
  r.regress_href = "regress.html";
  const XmlElement root = ParseXmlPage(HistoryReportHtml(r));
  const XmlElement* step = testing::FindId(root, CellAnchor(testing::kStepCell, testing::kStepConfig));
  ASSERT_NE(step, nullptr);
  const auto labels = Find(*step, "text", "change-label");
  ASSERT_EQ(labels.size(), 1u);
  EXPECT_EQ(labels[0]->text, testing::NightCommit(6) + " +20.0 %");
  EXPECT_EQ(Find(*step, "line", "change").size(), 1u);
  const auto points = Find(*step, "circle");
  ASSERT_EQ(points.size(), 12u);
  const std::string hover = Find(*points[0], "title")[0]->text;
  EXPECT_NE(hover.find(testing::NightCommit(0)), std::string::npos) << hover;
  EXPECT_NE(hover.find("finished 2023-11-14 23:13 UTC"), std::string::npos) << hover;
  EXPECT_NE(hover.find("SM clock 1740–1755 MHz"), std::string::npos) << hover;
  ASSERT_EQ(Find(*step, "table", "changes").size(), 1u);
  const auto back = Find(*step, "a", "regress-link");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0]->Attribute("href"), "regress.html#" + CellAnchor(testing::kStepCell, testing::kStepConfig));
  const XmlElement* flat = testing::FindId(root, CellAnchor(testing::kStepCell, testing::kFlatConfig));
  ASSERT_NE(flat, nullptr);
  EXPECT_TRUE(Find(*flat, "text", "change-label").empty());
  // The index links to both cells.
  const auto index = Find(root, "table", "sortable");
  ASSERT_EQ(index.size(), 1u);
  EXPECT_EQ(Find(*index[0], "a").size(), 2u);
}

TEST(HistoryReportHtml, IsTheSameBytesForTheSameData) {
  std::unique_ptr<Store> store = HistoryStore();
  const HistoryReport r = *ReadHistoryReport(*store, {testing::kSuite, "", "", ""}, "test.db");
  EXPECT_EQ(HistoryReportHtml(r), HistoryReportHtml(r));
  testing::WritePageIfAsked("history.html", HistoryReportHtml(r));
}

}  // namespace
}  // namespace fusetune::report
