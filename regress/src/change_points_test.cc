// The change-point detector on seeded synthetic histories with noise like an H200's, and its
// edge cases.
//
// Noise model of one commit's point: the median of 10 block medians, each t * exp(cv * Z)
// (Z standard normal; cv the block CV, 0.2 % to 2 %) and with probability 5 % slowed by a
// further 1 + U(2 %, 10 %) (an outlier block), times a run-level factor exp(cv / 2 * Z') for
// what a fresh process adds between commits (clocks, placement). The rates printed here are
// the ones docs/perf.md quotes.
#include "fusetune/regress/change_points.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace fusetune::regress {
namespace {

constexpr double kBlockCvs[] = {0.002, 0.005, 0.01, 0.02};
constexpr double kOutlierProbability = 0.05;
constexpr int kBlocksPerPoint = 10;
constexpr double kMicroseconds = 120.0;
// Every seed must find the change at block CVs up to this; above it (2 %: a point's noise is
// then about 1.3 %, the 0.7 % steps half of it) the rate is printed and held to a floor.
constexpr double kAlwaysFoundUpToCv = 0.01;
constexpr double kNoisiestFoundAtLeast = 0.75;

class HistoryModel {
 public:
  HistoryModel(uint64_t seed, double block_cv) : rng_(seed), cv_(block_cv) {}

  double Point(double factor) {
    std::vector<double> blocks;
    for (int i = 0; i < kBlocksPerPoint; ++i) {
      double v = kMicroseconds * factor * std::exp(cv_ * normal_(rng_));
      if (uniform_(rng_) < kOutlierProbability) v *= 1 + 0.02 + 0.08 * uniform_(rng_);
      blocks.push_back(v);
    }
    std::nth_element(blocks.begin(), blocks.begin() + kBlocksPerPoint / 2, blocks.end());
    const double upper = blocks[kBlocksPerPoint / 2];
    const double lower = *std::max_element(blocks.begin(), blocks.begin() + kBlocksPerPoint / 2);
    return 0.5 * (lower + upper) * std::exp(0.5 * cv_ * normal_(rng_));
  }

  // A history of `n` commits whose true time is multiplied by `factor(i)` at commit i.
  template <typename Factor>
  std::vector<SeriesPoint> Series(int n, Factor factor) {
    std::vector<SeriesPoint> series;
    for (int i = 0; i < n; ++i) series.push_back({absl::StrFormat("c%04d", i), Point(factor(i))});
    return series;
  }

 private:
  std::mt19937_64 rng_;
  double cv_;
  std::normal_distribution<double> normal_{0.0, 1.0};
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};

std::string Percent(double cv) { return absl::StrFormat("%.1f %%", 100 * cv); }

TEST(ChangePoints, FindsAThreePercentStepWithinTwoPoints) {
  constexpr int kSeeds = 25, kLength = 100, kStep = 50;
  std::printf("| block CV | 3 %% step found (+-2 points) | extra change points |\n|---|---|---|\n");
  for (double cv : kBlockCvs) {
    int found = 0, extra = 0;
    for (int seed = 0; seed < kSeeds; ++seed) {
      HistoryModel model(1000 + seed, cv);
      auto series = model.Series(kLength, [](int i) { return i < kStep ? 1.0 : 1.03; });
      auto result = DetectChangePoints(series);
      ASSERT_TRUE(result.ok()) << result.status();
      bool hit = false;
      for (const ChangePoint& cp : result->change_points) {
        if (!hit && std::abs(cp.index - kStep) <= 2 && cp.direction == ChangeDirection::kSlower) {
          hit = true;
          // A second change point close by (noise at 2 %) shortens a segment and skews its mean.
          if (cv <= kAlwaysFoundUpToCv) EXPECT_NEAR(cp.relative_change, 0.03, 0.01) << "cv " << cv;
          EXPECT_EQ(cp.commit, series[cp.index].commit);
          EXPECT_LE(cp.p_value, 0.001);
        } else {
          ++extra;
        }
      }
      found += hit;
      if (cv <= kAlwaysFoundUpToCv) EXPECT_TRUE(hit) << "cv " << cv << " seed " << seed;
    }
    EXPECT_GE(found, kNoisiestFoundAtLeast * kSeeds) << "cv " << cv;
    std::printf("| %s | %d/%d | %d |\n", Percent(cv).c_str(), found, kSeeds, extra);
  }
}

TEST(ChangePoints, FindsADriftOfFiveSmallStepsAndItsCumulativeChange) {
  // Five 0.7 % steps, one every 20 commits: each alone is below what a pairwise check of two
  // commits can see at these noise levels.
  constexpr int kSeeds = 25, kLength = 120;
  const double total = std::pow(1.007, 5) - 1;
  std::printf("| block CV | drift found | median cumulative change (true %.2f %%) |\n|---|---|---|\n",
              100 * total);
  for (double cv : kBlockCvs) {
    int found = 0;
    std::vector<double> cumulative;
    for (int seed = 0; seed < kSeeds; ++seed) {
      HistoryModel model(2000 + seed, cv);
      auto series = model.Series(kLength, [](int i) { return std::pow(1.007, std::min(5, i / 20)); });
      auto result = DetectChangePoints(series);
      ASSERT_TRUE(result.ok()) << result.status();
      if (result->change_points.empty()) continue;
      ++found;
      cumulative.push_back(result->cumulative_change);
      EXPECT_GT(result->cumulative_change, 0.5 * total) << "cv " << cv << " seed " << seed;
      EXPECT_LT(result->cumulative_change, 1.5 * total) << "cv " << cv << " seed " << seed;
    }
    if (cv <= kAlwaysFoundUpToCv) EXPECT_EQ(found, kSeeds) << "cv " << cv;
    EXPECT_GE(found, kNoisiestFoundAtLeast * kSeeds) << "cv " << cv;
    std::sort(cumulative.begin(), cumulative.end());
    const double median = cumulative.empty() ? 0 : cumulative[cumulative.size() / 2];
    std::printf("| %s | %d/%d | %.2f %% |\n", Percent(cv).c_str(), found, kSeeds, 100 * median);
  }
}

TEST(ChangePoints, AtMostOneFalseChangePointPerThousandAAPoints) {
  constexpr int kSeeds = 50, kLength = 1000;  // 50,000 A/A points per noise level
  std::printf("| block CV | A/A points | false change points | per 1,000 points |\n|---|---|---|---|\n");
  // Every level has seeds of its own: the model's noise scales with the CV (the outliers
  // aside), so shared seeds would give nearly the same histories at every level.
  uint64_t first_seed = 3000;
  for (double cv : kBlockCvs) {
    int false_points = 0;
    first_seed += kSeeds;
    for (int seed = 0; seed < kSeeds; ++seed) {
      HistoryModel model(first_seed + seed, cv);
      auto result = DetectChangePoints(model.Series(kLength, [](int) { return 1.0; }));
      ASSERT_TRUE(result.ok()) << result.status();
      false_points += static_cast<int>(result->change_points.size());
    }
    const double per_thousand = 1000.0 * false_points / (kSeeds * kLength);
    std::printf("| %s | %d | %d | %.3f |\n", Percent(cv).c_str(), kSeeds * kLength, false_points,
                per_thousand);
    EXPECT_LE(per_thousand, 1.0) << "cv " << cv;
  }
}

TEST(ChangePoints, AppendingPointByPointGivesTheBatchResult) {
  HistoryModel model(42, 0.01);
  auto series = model.Series(180, [](int i) { return i < 70 ? 1.0 : (i < 130 ? 1.04 : 0.98); });
  auto batch = DetectChangePoints(series);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_GE(batch->change_points.size(), 2u);
  ChangePointDetector detector;
  for (const SeriesPoint& p : series) ASSERT_TRUE(detector.Append({p}).ok());
  auto incremental = detector.Result();
  ASSERT_TRUE(incremental.ok()) << incremental.status();
  ASSERT_EQ(incremental->change_points.size(), batch->change_points.size());
  for (size_t k = 0; k < batch->change_points.size(); ++k) {
    EXPECT_EQ(incremental->change_points[k].index, batch->change_points[k].index);
    EXPECT_EQ(incremental->change_points[k].p_value, batch->change_points[k].p_value);
  }
  EXPECT_EQ(incremental->cumulative_change, batch->cumulative_change);
  EXPECT_EQ(detector.size(), 180);
}

TEST(ChangePoints, ReportsMeansDirectionAndCommitOfACleanStep) {
  std::vector<SeriesPoint> series;
  for (int i = 0; i < 20; ++i) series.push_back({"a" + std::to_string(i), 100.0 + (i % 2)});
  for (int i = 0; i < 20; ++i) series.push_back({"b" + std::to_string(i), 90.0 + (i % 2)});
  auto result = DetectChangePoints(series);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->change_points.size(), 1u);
  const ChangePoint& cp = result->change_points[0];
  EXPECT_EQ(cp.index, 20);
  EXPECT_EQ(cp.commit, "b0");
  EXPECT_DOUBLE_EQ(cp.mean_before, 100.5);
  EXPECT_DOUBLE_EQ(cp.mean_after, 90.5);
  EXPECT_NEAR(cp.relative_change, 90.5 / 100.5 - 1, 1e-12);
  EXPECT_EQ(cp.direction, ChangeDirection::kFaster);
  EXPECT_STREQ(ChangeDirectionName(cp.direction), "faster");
  EXPECT_NEAR(result->cumulative_change, 90.5 / 100.5 - 1, 1e-12);
}

TEST(ChangePoints, RejectsBadValuesAndGivesNothingForShortOrConstantSeries) {
  std::vector<SeriesPoint> series(10, SeriesPoint{"c", 5.0});
  series[3].value = std::nan("");
  EXPECT_EQ(DetectChangePoints(series).status().code(), absl::StatusCode::kInvalidArgument);
  series[3].value = 0;
  EXPECT_EQ(DetectChangePoints(series).status().code(), absl::StatusCode::kInvalidArgument);
  series[3].value = -1;
  ChangePointDetector detector;
  EXPECT_EQ(detector.Append(series).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(detector.size(), 0);

  series[3].value = 5.0;
  auto constant = DetectChangePoints(series);
  ASSERT_TRUE(constant.ok());
  EXPECT_TRUE(constant->change_points.empty());
  auto empty = DetectChangePoints({});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->change_points.empty());
  auto short_step = DetectChangePoints({{"a", 1}, {"b", 1}, {"c", 1}, {"d", 2}, {"e", 2}});
  ASSERT_TRUE(short_step.ok());
  EXPECT_TRUE(short_step->change_points.empty());
}

TEST(ChangePoints, RejectsBadOptions) {
  EXPECT_FALSE(ValidateChangePointOptions({.window = 4, .min_segment = 3}).ok());
  EXPECT_FALSE(ValidateChangePointOptions({.max_p_value = 0}).ok());
  EXPECT_FALSE(ValidateChangePointOptions({.max_p_value = 1}).ok());
  EXPECT_FALSE(ValidateChangePointOptions({.min_relative_change = -0.1}).ok());
  EXPECT_FALSE(ValidateChangePointOptions({.min_segment = 1}).ok());
  EXPECT_TRUE(ValidateChangePointOptions({}).ok());
  ChangePointDetector detector({.window = 2});
  EXPECT_EQ(detector.Append({{"a", 1}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(detector.Result().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChangePoints, WelchTTestMatchesTheStudentTTable) {
  // Equal sizes and variances: Welch's df is 2 (n - 1) = 10, and t = 2.228 is the 5 %
  // two-sided critical value.
  const double diff = 2.228139 * std::sqrt(2.0 / 6);
  EXPECT_NEAR(WelchTTestPValue(6, diff, 1, 6, 0, 1), 0.05, 1e-5);
  EXPECT_NEAR(WelchTTestPValue(6, 0, 1, 6, 0, 1), 1.0, 1e-12);
  EXPECT_EQ(WelchTTestPValue(1, 0, 1, 6, 5, 1), 1.0);
  EXPECT_EQ(WelchTTestPValue(3, 1, 0, 3, 2, 0), 0.0);
  EXPECT_NEAR(RegularizedIncompleteBeta(3, 3, 0.5), 0.5, 1e-12);
  EXPECT_NEAR(RegularizedIncompleteBeta(1, 1, 0.3), 0.3, 1e-12);
}

}  // namespace
}  // namespace fusetune::regress
