#include "regress_outputs.h"

#include <string>

#include <gtest/gtest.h>

namespace fusetune::cli {
namespace {

bench::CellComparison Cell(regress::Verdict verdict, bool accuracy_failed = false) {
  bench::CellComparison c;
  c.verdict.verdict = verdict;
  c.verdict.why = "ratio 1.0153 [1.0101, 1.0210], floor 1.50%";
  c.verdict.remeasure = verdict == regress::Verdict::kUnknown;
  c.verdict.accuracy.checked = true;
  c.verdict.accuracy.failed = accuracy_failed;
  return c;
}

// The first A/A run of a suite on a launch-bound cell once called it regressed (ratio 1.0153
// against a 1.5 % floor): a calibration reports such a difference as the host's noise.
TEST(ReportCalibrationDifferencesAsUnknown, CallsNoCellRegressedOrImprovedAndSaysWhy) {
  bench::Comparison c;
  c.cells = {Cell(regress::Verdict::kRegressed), Cell(regress::Verdict::kImproved), Cell(regress::Verdict::kSame),
             Cell(regress::Verdict::kUnknown), Cell(regress::Verdict::kSame, /*accuracy_failed=*/true)};
  EXPECT_EQ(ReportCalibrationDifferencesAsUnknown(c), 2);
  EXPECT_EQ(c.cells[0].verdict.verdict, regress::Verdict::kUnknown);
  EXPECT_EQ(c.cells[1].verdict.verdict, regress::Verdict::kUnknown);
  EXPECT_EQ(c.cells[2].verdict.verdict, regress::Verdict::kSame);
  EXPECT_EQ(c.cells[3].verdict.verdict, regress::Verdict::kUnknown);
  for (int i : {0, 1}) {
    EXPECT_NE(c.cells[i].verdict.why.find("between-process noise"), std::string::npos) << c.cells[i].verdict.why;
    EXPECT_NE(c.cells[i].verdict.why.find("ratio 1.0153"), std::string::npos) << "the numbers stay";
    EXPECT_FALSE(c.cells[i].verdict.remeasure);
  }
  EXPECT_EQ(c.CountVerdict(regress::Verdict::kRegressed), 0);
  EXPECT_FALSE(c.cells[0].verdict.Failed());
  EXPECT_TRUE(c.cells[4].verdict.Failed()) << "an accuracy failure is not the host's noise";
}

}  // namespace
}  // namespace fusetune::cli
