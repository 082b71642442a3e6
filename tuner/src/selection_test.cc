#include "fusetune/tuner/selection.h"

#include <algorithm>
#include <random>

#include "gtest/gtest.h"

namespace fusetune {
namespace {

const char* kProblem = "prefill/b1/hq12/hkv12/q128/k128/d64/causal0/fp32";

Trial Make(const std::string& config_key, double median, double spread_pct = 2,
           TrialOutcome outcome = TrialOutcome::kOk) {
  Trial t;
  t.problem_key = kProblem;
  t.config_key = config_key;
  t.trial_id = TrialId(1, kProblem, config_key, 0);
  t.outcome = outcome;
  t.median_us = median;
  t.p10_us = median * (1 - spread_pct / 100);
  t.p90_us = median * (1 + spread_pct / 100);
  return t;
}

TEST(Selection, ChallengerWithinNoiseKeepsIncumbent) {
  // bs32 comes first in ConfigOrderLess; bs64 is 1% faster with 2% spread: a tie.
  std::vector<Trial> trials = {Make("fused/bm64/bs64/t1/fp32/st1", 99.0),
                               Make("fused/bm64/bs32/t1/fp32/st1", 100.0)};
  std::optional<Trial> best = SelectBestTrial(trials);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->config_key, "fused/bm64/bs32/t1/fp32/st1");
}

TEST(Selection, ChallengerBeyondNoiseWins) {
  std::vector<Trial> trials = {Make("fused/bm64/bs32/t1/fp32/st1", 100.0),
                               Make("fused/bm64/bs64/t1/fp32/st1", 90.0)};
  EXPECT_EQ(SelectBestTrial(trials)->config_key, "fused/bm64/bs64/t1/fp32/st1");
}

TEST(Selection, NoisyIncumbentNeedsLargerMargin) {
  // Same 5% gap; with a 10% spread on either side it is noise.
  std::vector<Trial> trials = {Make("fused/bm64/bs32/t1/fp32/st1", 100.0, 10),
                               Make("fused/bm64/bs64/t1/fp32/st1", 95.0, 1)};
  EXPECT_EQ(SelectBestTrial(trials)->config_key, "fused/bm64/bs32/t1/fp32/st1");
  trials[0] = Make("fused/bm64/bs32/t1/fp32/st1", 100.0, 1);
  EXPECT_EQ(SelectBestTrial(trials)->config_key, "fused/bm64/bs64/t1/fp32/st1");
}

TEST(Selection, OnlyOkTrialsCount) {
  std::vector<Trial> trials = {
      Make("fused/bm64/bs32/t1/fp32/st1", 10.0, 2, TrialOutcome::kVerifyFailed),
      Make("fused/bm64/bs64/t1/fp32/st1", 5.0, 2, TrialOutcome::kTimedOut),
      Make("fused/bm32/bs64/t1/fp32/st1", 50.0)};
  EXPECT_EQ(SelectBestTrial(trials)->config_key, "fused/bm32/bs64/t1/fp32/st1");
  trials.pop_back();
  EXPECT_FALSE(SelectBestTrial(trials).has_value());
  EXPECT_TRUE(absl::IsNotFound(SelectBest(trials, "cpu/x/y", 1, "c").status()));
}

TEST(Selection, DeterministicUnderShuffledInput) {
  std::vector<Trial> trials;
  const int bms[] = {16, 32, 64, 128};
  const int bss[] = {16, 32, 64, 128};
  for (int bm : bms) {
    for (int bs : bss) {
      // Medians within ~1.5% of each other with 2% spread: many mutual ties.
      trials.push_back(Make("fused/bm" + std::to_string(bm) + "/bs" + std::to_string(bs) + "/t1/fp32/st1",
                            100.0 - 0.1 * bm / 16 - 0.05 * bs / 16));
    }
  }
  trials.push_back(Make("materialized/bm16/bs16/t1/fp32/st1", 300));
  const std::string expected = SelectBestTrial(trials)->config_key;
  std::mt19937 rng(42);
  for (int i = 0; i < 50; ++i) {
    std::shuffle(trials.begin(), trials.end(), rng);
    ASSERT_EQ(SelectBestTrial(trials)->config_key, expected);
  }
  // Everything tied with the first in order: the first in ConfigOrderLess wins.
  EXPECT_EQ(expected, "fused/bm16/bs16/t1/fp32/st1");
}

TEST(Selection, SpeedupsCompareBestOfEachVariant) {
  std::vector<Trial> trials = {Make("fused/bm64/bs32/t1/fp32/st1", 100.0),
                               Make("fused/bm64/bs64/t1/fp32/st1", 50.0),
                               Make("partial/bm64/bs64/t1/fp32/st1", 80.0),
                               Make("materialized/bm64/bs64/t1/fp32/st1", 200.0),
                               Make("materialized/bm64/bs32/t1/fp32/st1", 150.0)};
  absl::StatusOr<BestConfig> best = SelectBest(trials, "cpu/test/x86", 9, "abc");
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->config_key, "fused/bm64/bs64/t1/fp32/st1");
  EXPECT_DOUBLE_EQ(best->speedup_vs_materialized, 3.0);
  EXPECT_DOUBLE_EQ(best->speedup_vs_partial, 1.6);
  EXPECT_DOUBLE_EQ(best->best_materialized_us, 150.0);
  EXPECT_DOUBLE_EQ(best->best_partial_us, 80.0);
  EXPECT_EQ(best->device_class, "cpu/test/x86");
  EXPECT_EQ(best->run_id, 9);
  EXPECT_EQ(best->commit, "abc");
}

TEST(Selection, MaterializedCanBeTheOverallBest) {
  std::vector<Trial> trials = {Make("fused/bm64/bs32/t1/fp32/st1", 100.0),
                               Make("materialized/bm64/bs64/t1/fp32/st1", 50.0)};
  absl::StatusOr<BestConfig> best = SelectBest(trials, "d", 1, "c");
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best->config_key, "materialized/bm64/bs64/t1/fp32/st1");
  EXPECT_DOUBLE_EQ(best->speedup_vs_materialized, 0.5);
  EXPECT_EQ(best->speedup_vs_partial, 0);  // no partial trial: unknown
}

TEST(Selection, TrialsOfTwoProblemsAreRejected) {
  std::vector<Trial> trials = {Make("fused/bm64/bs32/t1/fp32/st1", 100.0),
                               Make("fused/bm64/bs64/t1/fp32/st1", 50.0)};
  trials[1].problem_key = "prefill/b1/hq12/hkv12/q256/k256/d64/causal0/fp32";
  EXPECT_TRUE(absl::IsInvalidArgument(SelectBest(trials, "d", 1, "c").status()));
}

}  // namespace
}  // namespace fusetune
