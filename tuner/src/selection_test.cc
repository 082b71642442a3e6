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

// A final-round trial whose per-round block medians are `rounds`.
Trial Rounds(const std::string& config_key, std::vector<double> rounds, int attempt = 0) {
  Trial t;
  t.problem_key = kProblem;
  t.config_key = config_key;
  t.stage = TrialStage::kFinal;
  t.attempt = attempt;
  t.trial_id = TrialId(1, kProblem, config_key, attempt, TrialStage::kFinal);
  t.samples_us = rounds;
  std::vector<double> sorted = rounds;
  std::sort(sorted.begin(), sorted.end());
  t.median_us = sorted[sorted.size() / 2];
  t.p10_us = sorted.front();
  t.p90_us = sorted.back();
  return t;
}

TEST(SelectionRounds, CompareRoundsPairsRoundsByIndexAndBoundsTheMedian) {
  // b drifts slower over the rounds (a power-capped GPU warming up) and a stays 2% faster in
  // every round: the medians of the two would say 5%+, the pairs say 2%.
  std::vector<double> b_rounds, a_rounds;
  for (int i = 0; i < 9; ++i) {
    b_rounds.push_back(100.0 + 10.0 * i);
    a_rounds.push_back(0.98 * b_rounds.back());
  }
  absl::StatusOr<RoundRatio> r = CompareRounds(Rounds("fused/bm64/bs64/t1/fp32/st1", a_rounds),
                                               Rounds("fused/bm64/bs32/t1/fp32/st1", b_rounds));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->median, 0.98, 1e-12);
  EXPECT_NEAR(r->low, 0.98, 1e-12);
  EXPECT_NEAR(r->high, 0.98, 1e-12);
  EXPECT_EQ(r->rounds, 9);
}

TEST(SelectionRounds, CompareRoundsIntervalUsesOrderStatistics) {
  // Ratios 0.91..0.99 (9 rounds): the 90% interval of the median is [x(2), x(8)].
  std::vector<double> a, b;
  for (int i = 1; i <= 9; ++i) {
    a.push_back(90.0 + i);
    b.push_back(100.0);
  }
  absl::StatusOr<RoundRatio> r = CompareRounds(Rounds("fused/bm64/bs64/t1/fp32/st1", a),
                                               Rounds("fused/bm64/bs32/t1/fp32/st1", b));
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->median, 0.95, 1e-12);
  EXPECT_NEAR(r->low, 0.92, 1e-12);
  EXPECT_NEAR(r->high, 0.98, 1e-12);
}

TEST(SelectionRounds, CompareRoundsRefusesUnpairedOrFailedTrials) {
  Trial a = Rounds("fused/bm64/bs64/t1/fp32/st1", {1, 2, 3});
  Trial b = Rounds("fused/bm64/bs32/t1/fp32/st1", {1, 2});
  EXPECT_TRUE(absl::IsInvalidArgument(CompareRounds(a, b).status()));
  b = Rounds("fused/bm64/bs32/t1/fp32/st1", {1, 2, 3});
  b.outcome = TrialOutcome::kLaunchFailed;
  EXPECT_TRUE(absl::IsInvalidArgument(CompareRounds(a, b).status()));
  b.outcome = TrialOutcome::kOk;
  b.samples_us = {1, 0, 3};
  EXPECT_TRUE(absl::IsInvalidArgument(CompareRounds(a, b).status()));
}

TEST(SelectionRounds, ChallengerFasterInSomeRoundsOnlyKeepsIncumbent) {
  // bs64 is faster in 6 rounds of 9 and slower in 3: the interval straddles 1, a tie.
  std::vector<double> first = {100, 100, 100, 100, 100, 100, 100, 100, 100};
  std::vector<double> second = {99, 99, 99, 99, 99, 99, 101, 101, 101};
  std::vector<Trial> trials = {Rounds("fused/bm64/bs64/t1/fp32/st1", second),
                               Rounds("fused/bm64/bs32/t1/fp32/st1", first)};
  EXPECT_EQ(SelectBestOfRounds(trials)->config_key, "fused/bm64/bs32/t1/fp32/st1");
}

TEST(SelectionRounds, ChallengerFasterInEveryRoundWinsEvenWhenItsMedianLooksSlower) {
  // The rounds ran while the clock fell: compared pairwise, bs64 wins every round by 1%,
  // though its median block (which happened to land on slow rounds) is not lower.
  std::vector<double> slow_then_fast = {200, 190, 180, 170, 160, 150, 140, 130, 120};
  std::vector<double> one_percent_less;
  for (double x : slow_then_fast) one_percent_less.push_back(0.99 * x);
  std::vector<Trial> trials = {Rounds("fused/bm64/bs32/t1/fp32/st1", slow_then_fast),
                               Rounds("fused/bm64/bs64/t1/fp32/st1", one_percent_less)};
  EXPECT_EQ(SelectBestOfRounds(trials)->config_key, "fused/bm64/bs64/t1/fp32/st1");
}

TEST(SelectionRounds, SelectBestUsesTheLatestFinalSetOverTheScreen) {
  // The screen says bs32 is fastest; the final rounds (attempt 1, a re-measured set) say
  // bs64 by 5% in every round. An older, partial set (attempt 0) claims otherwise.
  std::vector<Trial> trials = {
      Make("fused/bm64/bs32/t1/fp32/st1", 90.0), Make("fused/bm64/bs64/t1/fp32/st1", 100.0),
      Rounds("fused/bm64/bs32/t1/fp32/st1", {50, 50, 50}, 0),
      Rounds("fused/bm64/bs32/t1/fp32/st1", {100, 100, 100, 100, 100}, 1),
      Rounds("fused/bm64/bs64/t1/fp32/st1", {95, 95, 95, 95, 95}, 1),
      Rounds("materialized/bm64/bs64/t1/fp32/st1", {190, 190, 190, 190, 190}, 1)};
  absl::StatusOr<BestConfig> best = SelectBest(trials, "cpu/x/y", 1, "abc");
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->config_key, "fused/bm64/bs64/t1/fp32/st1");
  EXPECT_NEAR(best->median_us, 95.0, 1e-9);
  EXPECT_NEAR(best->speedup_vs_materialized, 2.0, 1e-9);  // 190 / 95, per round
}

TEST(SelectionRounds, VariantWithoutFinalRoundsFallsBackToItsScreen) {
  std::vector<Trial> trials = {Rounds("fused/bm64/bs32/t1/fp32/st1", {100, 100, 100}),
                               Rounds("fused/bm64/bs64/t1/fp32/st1", {101, 101, 101}),
                               Make("partial/bm64/bs64/t1/fp32/st1", 150.0)};
  absl::StatusOr<BestConfig> best = SelectBest(trials, "cpu/x/y", 1, "abc");
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best->config_key, "fused/bm64/bs32/t1/fp32/st1");
  EXPECT_NEAR(best->best_partial_us, 150.0, 1e-9);
  EXPECT_NEAR(best->speedup_vs_partial, 1.5, 1e-9);
}

}  // namespace fusetune
