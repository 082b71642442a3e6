#include "fusetune/records/regression.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace fusetune {
namespace {

Regression Valid() {
  Regression r;
  r.commit = "c1";
  r.baseline_commit = "c0";
  r.device_class = "cpu-reference";
  r.problem_key = "p";
  r.config_key = "k";
  r.metric = "latency";
  r.ratio = 1.2;
  r.p_value = 0.01;
  r.verdict = "regressed";
  return r;
}

TEST(ValidateRegression, AcceptsEveryVerdictName) {
  for (std::string_view v : kRegressionVerdicts) {
    Regression r = Valid();
    r.verdict = std::string(v);
    EXPECT_TRUE(ValidateRegression(r).ok()) << v;
  }
}

TEST(ValidateRegression, NamesTheFieldItRefuses) {
  Regression r = Valid();
  r.baseline_commit.clear();
  EXPECT_EQ(ValidateRegression(r).message(), "baseline_commit must not be empty");
  r = Valid();
  r.verdict = "worse";
  EXPECT_EQ(ValidateRegression(r).message(), "verdict must be one of regressed, improved, same, unknown, got 'worse'");
  r = Valid();
  r.ratio = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(ValidateRegression(r).code(), absl::StatusCode::kInvalidArgument);
  r = Valid();
  r.p_value = std::nan("");
  EXPECT_EQ(ValidateRegression(r).code(), absl::StatusCode::kInvalidArgument);
  r = Valid();
  r.created_unix_ms = -1;
  EXPECT_EQ(ValidateRegression(r).message(), "created_unix_ms must be >= 0");
}

}  // namespace
}  // namespace fusetune
