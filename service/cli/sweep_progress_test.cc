#include "sweep_progress.h"

#include <cstdio>
#include <string>

#include <gtest/gtest.h>

namespace fusetune::cli {
namespace {

SweepActivity Screening() {
  SweepActivity a;
  a.problem_index = 1;
  a.problem_count = 3;
  a.problem_key = "prefill/b1/hq1/hkv1/q32768/k32768/d64/causal0/fp32";
  a.step = "screen";
  a.variant = "fused";
  a.config_key = "fused/bm64/bs64/t2/fp32/st1";
  a.configs_done = 4;
  a.configs_in_space = 40;
  a.trials = 4;
  a.problem_seconds = 12;
  a.budget_seconds = 60;
  return a;
}

TEST(ProgressLine, SaysConfigsDoneOfTheSpaceAndTheBudgetLeft) {
  const std::string line = ProgressLine(Screening(), 8);
  EXPECT_NE(line.find("[2/3] prefill/b1/hq1/hkv1/q32768"), std::string::npos) << line;
  EXPECT_NE(line.find("4 of 40 done"), std::string::npos) << line;
  EXPECT_NE(line.find("fused/bm64/bs64/t2/fp32/st1 (8 s in it)"), std::string::npos) << line;
  EXPECT_NE(line.find("20 s into the problem"), std::string::npos) << line;
  EXPECT_NE(line.find("40 s of its 60 s budget left"), std::string::npos) << line;
}

TEST(ProgressLine, RoundsAndAnUnboundedBudget) {
  SweepActivity a = Screening();
  a.step = "final";
  a.configs_in_space = 5;
  a.budget_seconds = 0;
  const std::string line = ProgressLine(a, 3);
  EXPECT_NE(line.find("final rounds of 5 configs"), std::string::npos) << line;
  EXPECT_NE(line.find("no time budget"), std::string::npos) << line;
}

TEST(ProgressLine, BudgetLeftNeverNegative) {
  const std::string line = ProgressLine(Screening(), 100);
  EXPECT_NE(line.find("0 s of its 60 s budget left"), std::string::npos) << line;
}

// A new problem is printed at once, without waiting for the interval (an hour here).
TEST(SweepProgressTicker, PrintsANewProblemAtOnce) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  {
    SweepProgressTicker ticker(out, std::chrono::hours(1));
    ticker.Update(Screening());
  }  // the destructor joins the ticker thread: whatever it printed is flushed
  std::rewind(out);
  char buffer[4096] = {};
  const size_t n = std::fread(buffer, 1, sizeof buffer - 1, out);
  std::fclose(out);
  const std::string text(buffer, n);
  EXPECT_NE(text.find("[2/3]"), std::string::npos) << text;
  EXPECT_EQ(text.find('\n'), text.size() - 1) << "one line: " << text;
}

}  // namespace
}  // namespace fusetune::cli
