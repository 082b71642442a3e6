#include "fusetune/regress/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace fusetune::regress {
namespace {

TEST(MannWhitneyNullCounts, ThreeAgainstThreeMatchesEnumeration) {
  // The 20 orderings of three against three, counted by hand.
  absl::StatusOr<std::vector<double>> counts = MannWhitneyNullCounts(3, 3);
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(*counts, (std::vector<double>{1, 1, 2, 3, 3, 3, 3, 2, 1, 1}));
}

TEST(MannWhitneyNullCounts, SumsToTheBinomialCoefficient) {
  absl::StatusOr<std::vector<double>> counts = MannWhitneyNullCounts(20, 20);
  ASSERT_TRUE(counts.ok());
  double total = 0;
  for (double c : *counts) total += c;
  EXPECT_EQ(total, 137846528820.0);  // C(40, 20)
  EXPECT_FALSE(MannWhitneyNullCounts(-1, 3).ok());
}

TEST(MannWhitneySlower, ExactPValuesOfSmallSamples) {
  // Candidate above every baseline block: U = 9, p = 1 / C(6, 3).
  absl::StatusOr<RankTestResult> r = MannWhitneySlower({1, 2, 3}, {4, 5, 6});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->exact);
  EXPECT_EQ(r->u, 9);
  EXPECT_DOUBLE_EQ(r->p_value, 1.0 / 20);
  // U = 8: the two orderings with U >= 8.
  r = MannWhitneySlower({1, 2, 3}, {2.5, 4, 5});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->u, 8);
  EXPECT_DOUBLE_EQ(r->p_value, 2.0 / 20);
  r = MannWhitneySlower({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10});
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->p_value, 1.0 / 252);
  // The other direction: the candidate faster gives no evidence of slower.
  r = MannWhitneySlower({6, 7, 8, 9, 10}, {1, 2, 3, 4, 5});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->u, 0);
  EXPECT_DOUBLE_EQ(r->p_value, 1.0);
}

TEST(MannWhitneySlower, NormalApproximationAboveTheExactSizes) {
  std::vector<double> baseline, candidate;
  for (int i = 1; i <= 25; ++i) {
    baseline.push_back(i);
    candidate.push_back(100 + i);
  }
  absl::StatusOr<RankTestResult> r = MannWhitneySlower(baseline, candidate);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->exact);
  EXPECT_EQ(r->u, 625);
  // z = (625 - 312.5 - 0.5) / sqrt(625 * 51 / 12).
  EXPECT_NEAR(r->p_value / 7.078281124247817e-10, 1.0, 1e-6);
}

TEST(MannWhitneySlower, ExactAndNormalAgreeAtTheSwitchSize) {
  // 20 against 20, overlapping: the exact tail and the continuity-corrected normal tail
  // differ by well under a percentage point.
  std::vector<double> baseline, candidate;
  for (int i = 0; i < 20; ++i) {
    baseline.push_back(100 + i);
    candidate.push_back(106.5 + i);
  }
  absl::StatusOr<RankTestResult> r = MannWhitneySlower(baseline, candidate);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->exact);
  const double z = (r->u - 200 - 0.5) / std::sqrt(400.0 * 41 / 12);
  const double normal = 0.5 * std::erfc(z / std::sqrt(2.0));
  EXPECT_GT(r->p_value, 1e-3);
  EXPECT_NEAR(r->p_value, normal, 0.005);
}

TEST(MannWhitneySlower, TiesUseTheCorrectedNormalApproximation) {
  absl::StatusOr<RankTestResult> r = MannWhitneySlower({1, 1, 2, 2}, {2, 2, 3, 3});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->exact);
  EXPECT_EQ(r->u, 14);
  EXPECT_NEAR(r->p_value, 0.04317936982350622, 1e-12);
  // Every value tied: no evidence.
  r = MannWhitneySlower({2, 2}, {2, 2});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->p_value, 1.0);
}

TEST(MannWhitneySlower, RejectsInvalidSamples) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(MannWhitneySlower({}, {1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MannWhitneySlower({1}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(MannWhitneySlower({1, nan}, {1}).ok());
  EXPECT_FALSE(MannWhitneySlower({1}, {0}).ok());
  EXPECT_FALSE(MannWhitneySlower({-1}, {1}).ok());
  EXPECT_FALSE(MannWhitneySlower({1}, {inf}).ok());
  EXPECT_FALSE(KolmogorovSmirnov({}, {1}).ok());
  EXPECT_FALSE(RatioOfMedians({1}, {nan}).ok());
  EXPECT_FALSE(RatioOfMedians({1}, {1}, 1.0).ok());
}

TEST(KolmogorovSurvival, MatchesTheTabulatedCriticalValues) {
  EXPECT_NEAR(KolmogorovSurvival(1.2238), 0.10, 1e-4);
  EXPECT_NEAR(KolmogorovSurvival(1.3581), 0.05, 1e-4);
  EXPECT_NEAR(KolmogorovSurvival(1.6276), 0.01, 1e-4);
  EXPECT_EQ(KolmogorovSurvival(0), 1.0);
}

TEST(KolmogorovSmirnov, SeparatedSamples) {
  absl::StatusOr<KsTestResult> r = KolmogorovSmirnov({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->d, 1.0);
  EXPECT_EQ(r->d_slower, 1.0);
  EXPECT_NEAR(r->p_slower, std::exp(-5.0), 1e-12);  // n_e = 2.5
  EXPECT_NEAR(r->p_two_sided, 0.0037813540593701006, 1e-9);
  r = KolmogorovSmirnov({6, 7, 8, 9, 10}, {1, 2, 3, 4, 5});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->d_slower, 0.0);
  EXPECT_EQ(r->p_slower, 1.0);
}

TEST(KolmogorovSmirnov, InterleavedSamplesAndTies) {
  // F_a - F_b after 1: 1/2 - 0; after 2: 1 - 1/2 (a = {1, 2}, b = {2, 3}).
  absl::StatusOr<KsTestResult> r = KolmogorovSmirnov({1, 2}, {2, 3});
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->d, 0.5);
  EXPECT_DOUBLE_EQ(r->d_slower, 0.5);
  r = KolmogorovSmirnov({1, 2, 3}, {1, 2, 3});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->d, 0.0);
  EXPECT_EQ(r->p_two_sided, 1.0);
}

TEST(MultipleComparisons, HolmWorkedExample) {
  // Sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 -> max(0.04, 0.06).
  absl::StatusOr<std::vector<double>> holm = HolmAdjust({0.01, 0.04, 0.03, 0.005});
  ASSERT_TRUE(holm.ok());
  const std::vector<double> expected = {0.03, 0.06, 0.06, 0.02};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR((*holm)[i], expected[i], 1e-15);
  holm = HolmAdjust({0.5, 0.9});
  ASSERT_TRUE(holm.ok());
  EXPECT_EQ((*holm)[0], 1.0);  // capped
  EXPECT_EQ((*holm)[1], 1.0);
}

TEST(MultipleComparisons, BenjaminiHochbergWorkedExample) {
  // Sorted: 0.005 x 4/1 = 0.02, 0.01 x 4/2 = 0.02, 0.03 x 4/3 = 0.04, 0.04 x 4/4 = 0.04.
  absl::StatusOr<std::vector<double>> bh = BenjaminiHochbergAdjust({0.01, 0.04, 0.03, 0.005});
  ASSERT_TRUE(bh.ok());
  const std::vector<double> expected = {0.02, 0.04, 0.04, 0.02};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR((*bh)[i], expected[i], 1e-15);
}

TEST(MultipleComparisons, RejectsInvalidPValuesAndAcceptsEmpty) {
  EXPECT_FALSE(HolmAdjust({0.1, std::nan("")}).ok());
  EXPECT_FALSE(BenjaminiHochbergAdjust({1.5}).ok());
  EXPECT_FALSE(HolmAdjust({-0.1}).ok());
  absl::StatusOr<std::vector<double>> empty = HolmAdjust({});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(RatioOfMedians, IntervalIsTheOrderStatisticAtTheExactCriticalValue) {
  std::vector<double> baseline, candidate;
  for (int i = 0; i < 10; ++i) {
    baseline.push_back(100 + 1.3 * i + 0.01 * i * i);
    candidate.push_back(110 + 1.7 * i + 0.02 * i * i);
  }
  absl::StatusOr<RatioEstimate> r = RatioOfMedians(baseline, candidate, 0.9);
  ASSERT_TRUE(r.ok());
  std::vector<double> ratios;
  for (double c : candidate) {
    for (double b : baseline) ratios.push_back(c / b);
  }
  std::sort(ratios.begin(), ratios.end());
  // For 10 against 10, P(U <= 27) = 0.0446 <= 0.05 < P(U <= 28): 27 ratios are cut each end.
  EXPECT_NEAR(r->lower, ratios[27], 1e-12);
  EXPECT_NEAR(r->upper, ratios[100 - 1 - 27], 1e-12);
  EXPECT_NEAR(r->ratio, (110 + 1.7 * 4.5 + 0.02 * 20.5) / (100 + 1.3 * 4.5 + 0.01 * 20.5), 1e-12);
  EXPECT_LT(r->lower, r->pairwise_ratio);
  EXPECT_GT(r->upper, r->pairwise_ratio);
}

TEST(RatioOfMedians, CoversTheTrueFactorAtItsConfidence) {
  // 10 against 10 lognormal blocks, factor 1.04: the interval's exact coverage is
  // 1 - 2 * 0.0446 = 0.911.
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0.0, 0.01);
  int covered = 0;
  const int trials = 1000;
  for (int t = 0; t < trials; ++t) {
    std::vector<double> baseline, candidate;
    for (int i = 0; i < 10; ++i) {
      baseline.push_back(std::exp(noise(rng)));
      candidate.push_back(1.04 * std::exp(noise(rng)));
    }
    absl::StatusOr<RatioEstimate> r = RatioOfMedians(baseline, candidate, 0.9);
    ASSERT_TRUE(r.ok());
    if (r->lower <= 1.04 && 1.04 <= r->upper) ++covered;
  }
  EXPECT_GE(covered, 0.88 * trials);
  EXPECT_LE(covered, 0.94 * trials);
}

TEST(RatioOfMedians, LargeSamplesUseTheNormalCriticalValue) {
  std::vector<double> baseline, candidate;
  for (int i = 0; i < 30; ++i) {
    baseline.push_back(1 + 0.001 * i);
    candidate.push_back(1.05 + 0.0013 * i);
  }
  absl::StatusOr<RatioEstimate> r = RatioOfMedians(baseline, candidate, 0.9);
  ASSERT_TRUE(r.ok());
  EXPECT_LT(r->lower, r->pairwise_ratio);
  EXPECT_GT(r->upper, r->pairwise_ratio);
  EXPECT_GT(r->lower, 1.0);
}

TEST(RatioOfMedians, TinySamplesGiveTheWholeRange) {
  absl::StatusOr<RatioEstimate> r = RatioOfMedians({1, 2}, {3, 4}, 0.9);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->lower, 1.5);
  EXPECT_DOUBLE_EQ(r->upper, 4.0);
}

TEST(SignedRankNullCounts, FourDifferencesMatchEnumeration) {
  // T+ over the 16 sign patterns of ranks 1..4, counted by hand.
  absl::StatusOr<std::vector<double>> counts = SignedRankNullCounts(4);
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(*counts, (std::vector<double>{1, 1, 1, 2, 2, 2, 2, 2, 1, 1, 1}));
  absl::StatusOr<std::vector<double>> forty = SignedRankNullCounts(40);
  ASSERT_TRUE(forty.ok());
  double total = 0;
  for (double c : *forty) total += c;
  EXPECT_EQ(total, std::ldexp(1.0, 40));
  EXPECT_FALSE(SignedRankNullCounts(-1).ok());
  EXPECT_FALSE(SignedRankNullCounts(51).ok());
}

TEST(WilcoxonSignedRankAbove, ExactPValuesOfSmallSamples) {
  // Every difference positive: T+ = 15 of 5, p = 1 / 32.
  absl::StatusOr<SignedRankTestResult> r = WilcoxonSignedRankAbove({0.1, 0.2, 0.3, 0.4, 0.5});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->exact);
  EXPECT_EQ(r->t_plus, 15);
  EXPECT_DOUBLE_EQ(r->p_value, 1.0 / 32);
  // The smallest negative: T+ = 14, the patterns with T+ >= 14 are two.
  r = WilcoxonSignedRankAbove({-0.1, 0.2, 0.3, 0.4, 0.5});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->t_plus, 14);
  EXPECT_DOUBLE_EQ(r->p_value, 2.0 / 32);
  // The other direction of the first sample: every pattern has T+ >= 0.
  r = WilcoxonSignedRankAbove({-0.1, -0.2, -0.3, -0.4, -0.5});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->t_plus, 0);
  EXPECT_DOUBLE_EQ(r->p_value, 1.0);
}

TEST(WilcoxonSignedRankAbove, ZerosAreDroppedAndAllZeroIsNoEvidence) {
  absl::StatusOr<SignedRankTestResult> r = WilcoxonSignedRankAbove({0, 0.1, 0.2, 0.3, 0.4, 0.5, 0});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->nonzero, 5);
  EXPECT_DOUBLE_EQ(r->p_value, 1.0 / 32);
  r = WilcoxonSignedRankAbove({0, 0, 0});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->nonzero, 0);
  EXPECT_EQ(r->p_value, 1);
}

TEST(WilcoxonSignedRankAbove, TiesAndLargeSamplesUseTheNormalApproximation) {
  absl::StatusOr<SignedRankTestResult> r = WilcoxonSignedRankAbove({0.1, 0.1, 0.2, -0.3, 0.4, 0.5});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->exact);
  EXPECT_DOUBLE_EQ(r->t_plus, 1.5 + 1.5 + 3 + 5 + 6);
  EXPECT_GT(r->p_value, 0.01);
  EXPECT_LT(r->p_value, 0.2);
  // 41 untied differences, 30 of them positive.
  std::vector<double> d;
  for (int i = 1; i <= 41; ++i) d.push_back((i % 4 == 0 ? -1 : 1) * 0.01 * i);
  r = WilcoxonSignedRankAbove(d);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->exact);
  EXPECT_LT(r->p_value, 0.01);
}

TEST(WilcoxonSignedRankAbove, ExactAndNormalAgreeAtTheSwitchSize) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> z(0.2, 1.0);
  std::vector<double> d;
  for (int i = 0; i < kExactSignedRankMaxSize; ++i) d.push_back(z(rng));
  absl::StatusOr<SignedRankTestResult> exact = WilcoxonSignedRankAbove(d);
  ASSERT_TRUE(exact.ok());
  ASSERT_TRUE(exact->exact);
  d.push_back(1e-9);  // one difference more (the smallest): the test goes to the approximation
  absl::StatusOr<SignedRankTestResult> normal = WilcoxonSignedRankAbove(d);
  ASSERT_TRUE(normal.ok());
  ASSERT_FALSE(normal->exact);
  EXPECT_NEAR(normal->p_value, exact->p_value, 0.02);
}

TEST(WilcoxonSignedRankAbove, RejectsEmptyAndNonFiniteInput) {
  EXPECT_FALSE(WilcoxonSignedRankAbove({}).ok());
  EXPECT_FALSE(WilcoxonSignedRankAbove({0.1, std::numeric_limits<double>::quiet_NaN()}).ok());
  EXPECT_FALSE(WilcoxonSignedRankAbove({0.1, std::numeric_limits<double>::infinity()}).ok());
}

TEST(PairedRatio, RemovesADriftBothSidesShare) {
  // The clock drifts over 20 rounds by 30 %; the candidate is 1 % slower in every round.
  std::vector<double> base, cand;
  for (int i = 0; i < 20; ++i) {
    const double drift = 1 + 0.3 * std::sin(0.7 * i);
    base.push_back(100 * drift);
    cand.push_back(101 * drift * (1 + 0.001 * ((i * 7) % 5 - 2)));
  }
  absl::StatusOr<RatioEstimate> paired = PairedRatio(base, cand);
  ASSERT_TRUE(paired.ok());
  EXPECT_NEAR(paired->pairwise_ratio, 1.01, 0.001);
  EXPECT_LT(paired->lower, 1.01);
  EXPECT_GT(paired->upper, 1.01);
  EXPECT_LT(paired->upper / paired->lower, 1.005);
  // Unpaired, the drift is in the interval.
  absl::StatusOr<RatioEstimate> unpaired = RatioOfMedians(base, cand);
  ASSERT_TRUE(unpaired.ok());
  EXPECT_GT(unpaired->upper / unpaired->lower, 1.1);
}

TEST(PairedRatio, IntervalIsTheWalshAverageAtTheExactCriticalValue) {
  // Five pairs, log ratios 0.01 .. 0.05: 15 Walsh averages, sorted 0.01 0.015 0.02 0.02 0.025
  // 0.025 0.03 0.03 0.03 0.035 0.035 0.04 0.04 0.045 0.05. At 80 % (10 % a side)
  // P(T+ <= 2) = 3/32 <= 0.1 < P(T+ <= 3) = 5/32: the interval is the 3rd smallest and 3rd
  // largest. At 90 % even P(T+ <= 1) = 2/32 is above 5 %: the whole range.
  const std::vector<double> base = {1, 1, 1, 1, 1};
  const std::vector<double> cand = {std::exp(0.01), std::exp(0.02), std::exp(0.03), std::exp(0.04), std::exp(0.05)};
  absl::StatusOr<RatioEstimate> r = PairedRatio(base, cand, 0.8);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(std::log(r->pairwise_ratio), 0.03, 1e-12);
  EXPECT_NEAR(std::log(r->lower), 0.02, 1e-12);
  EXPECT_NEAR(std::log(r->upper), 0.04, 1e-12);
  r = PairedRatio(base, cand, 0.9);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(std::log(r->lower), 0.01, 1e-12);
  EXPECT_NEAR(std::log(r->upper), 0.05, 1e-12);
}

TEST(PairedRatio, CoversTheTrueFactorAtItsConfidence) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> noise(0, 0.01);
  int covered = 0;
  const int trials = 2000;
  for (int t = 0; t < trials; ++t) {
    std::vector<double> base, cand;
    for (int i = 0; i < 12; ++i) {
      const double round = std::exp(5 * noise(rng));
      base.push_back(50 * round * std::exp(noise(rng)));
      cand.push_back(50 * 1.02 * round * std::exp(noise(rng)));
    }
    absl::StatusOr<RatioEstimate> r = PairedRatio(base, cand, 0.9);
    ASSERT_TRUE(r.ok());
    covered += r->lower <= 1.02 && 1.02 <= r->upper ? 1 : 0;
  }
  EXPECT_GE(covered, 0.88 * trials);
  EXPECT_LE(covered, 0.95 * trials);
}

TEST(PairedRatio, RejectsUnequalSizesAndInvalidSamples) {
  EXPECT_FALSE(PairedRatio({1, 2, 3}, {1, 2}).ok());
  EXPECT_FALSE(PairedRatio({1, 2, 3}, {1, 2, 0}).ok());
  EXPECT_FALSE(PairedRatio({1, 2, 3}, {1, 2, 3}, 1.0).ok());
  absl::StatusOr<RatioEstimate> one = PairedRatio({2}, {3});
  ASSERT_TRUE(one.ok());
  EXPECT_DOUBLE_EQ(one->pairwise_ratio, 1.5);
}

}  // namespace
}  // namespace fusetune::regress
