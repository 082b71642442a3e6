#include "fusetune/regress/verdict.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <vector>

#include "fusetune/records/regression.h"
#include "gtest/gtest.h"

namespace fusetune::regress {
namespace {

// Ten blocks around `centre` with a deterministic 0.2 % spread.
std::vector<double> Blocks(double centre, int n = 10) {
  std::vector<double> blocks;
  for (int i = 0; i < n; ++i) blocks.push_back(centre * (1 + 0.002 * ((i * 7) % 10 - 4.5) / 4.5));
  return blocks;
}

CellInput Cell(double baseline, double candidate, double aa_noise = 0.002) {
  CellInput cell;
  cell.problem_key = "prefill/b1/h8/kv8/q512/s512/d64/fp32";
  cell.config_key = "fused/bm64/bs64/t2/fp32/st1";
  cell.baseline = Blocks(baseline);
  cell.candidate = Blocks(candidate);
  cell.aa_noise = aa_noise;
  return cell;
}

TEST(VerdictName, IsTheNameTheStoreRecords) {
  const Verdict all[] = {Verdict::kRegressed, Verdict::kImproved, Verdict::kSame, Verdict::kUnknown};
  ASSERT_EQ(std::size(all), kRegressionVerdicts.size());
  for (size_t i = 0; i < std::size(all); ++i) EXPECT_EQ(VerdictName(all[i]), kRegressionVerdicts[i]);
}

TEST(JudgeCell, ClearSlowdownRegresses) {
  absl::StatusOr<CellVerdict> v = JudgeCell(Cell(100, 106));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->verdict, Verdict::kRegressed) << v->why;
  EXPECT_TRUE(v->Failed());
  EXPECT_NEAR(v->ratio.ratio, 1.06, 1e-9);
  EXPECT_GT(v->ratio.lower, 1.05);
  EXPECT_LT(v->p_slower, 1e-4);
  EXPECT_EQ(v->p_slower, v->p_slower_adjusted);
  EXPECT_DOUBLE_EQ(v->floor, 0.015);  // 3 x 0.2 % is below the 1.5 % minimum
  EXPECT_NE(v->why.find("slower beyond the floor"), std::string::npos);
}

TEST(JudgeCell, ClearSpeedupImproves) {
  absl::StatusOr<CellVerdict> v = JudgeCell(Cell(100, 94));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->verdict, Verdict::kImproved) << v->why;
  EXPECT_FALSE(v->Failed());
}

TEST(JudgeCell, IdenticalBuildsAreTheSame) {
  absl::StatusOr<CellVerdict> v = JudgeCell(Cell(100, 100.1));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->verdict, Verdict::kSame) << v->why;
  EXPECT_FALSE(v->remeasure);
}

TEST(JudgeCell, SignificantButBelowTheFloorIsNotARegression) {
  // 1 % slower, significant, but the floor is 1.5 %.
  absl::StatusOr<CellVerdict> v = JudgeCell(Cell(100, 101));
  ASSERT_TRUE(v.ok());
  EXPECT_LT(v->p_slower, 0.01);
  EXPECT_NE(v->verdict, Verdict::kRegressed) << v->why;
}

TEST(JudgeCell, NoisyCellRaisesTheFloor) {
  // 5 % slower with 2 % A/A noise: floor 6 %.
  absl::StatusOr<CellVerdict> v = JudgeCell(Cell(100, 105, 0.02));
  ASSERT_TRUE(v.ok());
  EXPECT_DOUBLE_EQ(v->floor, 0.06);
  EXPECT_NE(v->verdict, Verdict::kRegressed);
}

TEST(JudgeCell, TheCalibratedBetweenProcessNoiseRaisesTheFloor) {
  // 3 % slower with tight blocks: a regression at the 1.5 % minimum, not when earlier A/A
  // comparisons saw two processes of the build differ by 2 % (floor 6 %).
  CellInput cell = Cell(100, 103);
  absl::StatusOr<CellVerdict> v = JudgeCell(cell);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->verdict, Verdict::kRegressed) << v->why;
  cell.calibrated_noise = 0.02;
  v = JudgeCell(cell);
  ASSERT_TRUE(v.ok());
  EXPECT_DOUBLE_EQ(v->floor, 0.06);
  EXPECT_DOUBLE_EQ(Floor(cell, VerdictOptions{}), 0.06);
  EXPECT_NE(v->verdict, Verdict::kRegressed) << v->why;
}

TEST(JudgeCell, ACellCalibratedEnoughTimesTakesTheCalibratedMinimum) {
  // 1 % slower with tight blocks and a quiet calibration (0.1 %): the fixed 1.5 % minimum hides
  // it; with a calibrated minimum of 0.5 % it is called once three A/A comparisons are behind
  // the calibration, not before.
  CellInput cell = Cell(100, 101);
  cell.calibrated_noise = 0.001;
  VerdictOptions options;
  options.calibrated_min_floor = 0.005;
  for (int calibrations : {0, 2}) {
    cell.calibrations = calibrations;
    EXPECT_DOUBLE_EQ(MinimumFloor(cell, options), 0.015) << calibrations;
    absl::StatusOr<CellVerdict> v = JudgeCell(cell, options);
    ASSERT_TRUE(v.ok());
    EXPECT_NE(v->verdict, Verdict::kRegressed) << v->why;
  }
  cell.calibrations = 3;
  EXPECT_DOUBLE_EQ(MinimumFloor(cell, options), 0.005);
  absl::StatusOr<CellVerdict> v = JudgeCell(cell, options);
  ASSERT_TRUE(v.ok());
  EXPECT_DOUBLE_EQ(v->floor, 0.006) << "3 x the blocks' 0.2 % A/A noise is above the 0.5 % minimum";
  EXPECT_EQ(v->verdict, Verdict::kRegressed) << v->why;
  // Without the option every cell keeps min_floor, however calibrated.
  EXPECT_DOUBLE_EQ(MinimumFloor(cell, VerdictOptions{}), 0.015);
}

TEST(JudgeCell, ACalibratedCellWhoseSidesKeepDifferingKeepsThreeTimesThatFloor) {
  // Earlier A/A comparisons of the cell were about 1 % apart each time: a 1.5 % difference now
  // is within 3 x that, whatever the calibrated minimum.
  CellInput cell = Cell(100, 101.5, 0.0005);
  cell.calibrated_noise = 0.01;
  cell.calibrations = 10;
  VerdictOptions options;
  options.calibrated_min_floor = 0.005;
  absl::StatusOr<CellVerdict> v = JudgeCell(cell, options);
  ASSERT_TRUE(v.ok());
  EXPECT_DOUBLE_EQ(v->floor, 0.03);
  EXPECT_NE(v->verdict, Verdict::kRegressed) << v->why;
  EXPECT_NE(v->why.find("floor 3.00%"), std::string::npos) << v->why;
}

TEST(JudgeCell, ACalibratedMinimumOutsideItsRangeIsInvalid) {
  VerdictOptions options;
  options.calibrated_min_floor = -0.001;
  EXPECT_EQ(JudgeCell(Cell(100, 100), options).status().code(), absl::StatusCode::kInvalidArgument);
  options.calibrated_min_floor = 0.2;  // above max_floor
  EXPECT_EQ(JudgeCell(Cell(100, 100), options).status().code(), absl::StatusCode::kInvalidArgument);
  options.calibrated_min_floor = 0.005;
  options.min_calibrations = 0;
  EXPECT_EQ(JudgeCell(Cell(100, 100), options).status().code(), absl::StatusCode::kInvalidArgument);
  CellInput cell = Cell(100, 100);
  cell.calibrations = -1;
  EXPECT_EQ(JudgeCell(cell).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JudgeCell, AFloorWiderThanTheMaximumIsUnknownNotSame) {
  // Identical medians, but blocks so noisy that the floor is 15 %: "same" would promise that no
  // change up to 15 % happened. Unknown, with the reason, and more blocks asked for (they
  // narrow the blocks' noise).
  absl::StatusOr<CellVerdict> v = JudgeCell(Cell(100, 100.1, 0.05));
  ASSERT_TRUE(v.ok());
  EXPECT_DOUBLE_EQ(v->floor, 0.15);
  EXPECT_EQ(v->verdict, Verdict::kUnknown) << v->why;
  EXPECT_TRUE(v->remeasure);
  EXPECT_NE(v->why.find("cannot resolve"), std::string::npos) << v->why;
  EXPECT_NE(v->why.find("blocks' A/A noise"), std::string::npos) << v->why;
  EXPECT_NE(v->why.find("wider than the 10.00%"), std::string::npos) << v->why;
  // A wider maximum lets it be called the same.
  VerdictOptions wide;
  wide.max_floor = 0.2;
  v = JudgeCell(Cell(100, 100.1, 0.05), wide);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->verdict, Verdict::kSame) << v->why;
}

TEST(JudgeCell, ACellTheHostCannotResolveIsUnknownWithoutMoreBlocks) {
  // The calibrated between-process noise (5 %) makes the floor 15 %; more blocks cannot
  // narrow it, so none are asked for.
  CellInput cell = Cell(100, 100.1);
  cell.calibrated_noise = 0.05;
  absl::StatusOr<CellVerdict> v = JudgeCell(cell);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->verdict, Verdict::kUnknown) << v->why;
  EXPECT_FALSE(v->remeasure);
  EXPECT_NE(v->why.find("cannot resolve on this host"), std::string::npos) << v->why;
  EXPECT_NE(v->why.find("calibrated between-process noise 5.00%"), std::string::npos) << v->why;
  // A minimum above the maximum would leave no cell that can be the same: refused.
  VerdictOptions inverted;
  inverted.min_floor = 0.2;
  EXPECT_EQ(JudgeCell(Cell(100, 100), inverted).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JudgeCell, AChangeLargerThanAWideFloorIsStillCalled) {
  CellInput cell = Cell(100, 150);
  cell.calibrated_noise = 0.05;  // floor 15 %
  absl::StatusOr<CellVerdict> v = JudgeCell(cell);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->verdict, Verdict::kRegressed) << v->why;
  v = JudgeCell(Cell(100, 60, 0.05));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->verdict, Verdict::kImproved) << v->why;
}

TEST(JudgeCell, UndecidedCellAsksForMoreBlocksUpToTheCap) {
  // Three blocks a side straddling the floor: neither significant nor inside it.
  CellInput cell = Cell(100, 102);
  cell.baseline = {100, 103, 97};
  cell.candidate = {101, 105, 100};
  absl::StatusOr<CellVerdict> v = JudgeCell(cell);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->verdict, Verdict::kUnknown) << v->why;
  EXPECT_TRUE(v->remeasure);
  EXPECT_EQ(v->suggested_blocks, 6);
  VerdictOptions capped;
  capped.max_blocks = 3;
  v = JudgeCell(cell, capped);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->verdict, Verdict::kUnknown);
  EXPECT_FALSE(v->remeasure);
  EXPECT_NE(v->why.find("block cap"), std::string::npos);
}

TEST(JudgeCell, ANearMissAsksForTheBlocksItsIntervalNeedsNotTwiceAsMany) {
  // Paired rounds whose interval reaches just past a 1.5 % floor: a few more blocks fit it.
  CellInput cell;
  cell.problem_key = "p";
  cell.config_key = "c";
  cell.paired = true;
  for (int i = 0; i < 10; ++i) {
    cell.baseline.push_back(100);
    cell.candidate.push_back(100 * std::exp(0.04 * ((i * 7) % 10 - 4.5) / 4.5));
  }
  absl::StatusOr<CellVerdict> v = JudgeCell(cell);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->verdict, Verdict::kUnknown) << v->why;
  ASSERT_TRUE(v->remeasure);
  const double half_width = 0.5 * std::log(v->ratio.upper / v->ratio.lower);
  const double room = std::log1p(v->floor) - std::abs(std::log(v->ratio.pairwise_ratio));
  ASSERT_GT(room, 0);
  const int expected = static_cast<int>(std::ceil(1.25 * 10 * (half_width / room) * (half_width / room)));
  EXPECT_EQ(v->suggested_blocks, std::clamp(expected, 13, 40)) << v->why;
  EXPECT_NE(v->suggested_blocks, 20);
}

TEST(JudgeCell, RejectsBadInput) {
  CellInput cell = Cell(100, 100);
  cell.candidate.clear();
  EXPECT_EQ(JudgeCell(cell).status().code(), absl::StatusCode::kInvalidArgument);
  cell = Cell(100, 100);
  cell.baseline[3] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(JudgeCell(cell).ok());
  cell = Cell(100, 100);
  cell.candidate[0] = 0;
  EXPECT_FALSE(JudgeCell(cell).ok());
  cell = Cell(100, 100, -0.01);
  EXPECT_FALSE(JudgeCell(cell).ok());
  cell = Cell(100, 100);
  cell.calibrated_noise = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(JudgeCell(cell).ok());
  VerdictOptions bad;
  bad.alpha = 0;
  EXPECT_FALSE(JudgeCell(Cell(100, 100), bad).ok());
  bad = {};
  bad.max_blocks = 0;
  EXPECT_FALSE(JudgeCell(Cell(100, 100), bad).ok());
  cell = Cell(100, 100);
  cell.accuracy = AccuracyInput{.baseline_error = 1e-6, .candidate_error = 1e-6, .tolerance = 0};
  EXPECT_FALSE(JudgeCell(cell).ok());
}

TEST(JudgeCell, AccuracyAboveTheToleranceFailsTheCell) {
  CellInput cell = Cell(100, 100);
  cell.accuracy = AccuracyInput{.baseline_error = 1e-6, .candidate_error = 2e-3,
                                .tolerance = 1e-3, .growth_limit = ErrorGrowthLimit("fp32")};
  absl::StatusOr<CellVerdict> v = JudgeCell(cell);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->verdict, Verdict::kSame);
  EXPECT_TRUE(v->accuracy.failed);
  EXPECT_TRUE(v->Failed());
  EXPECT_NE(v->why.find("accuracy failed"), std::string::npos);
  cell.accuracy->candidate_error = std::numeric_limits<double>::quiet_NaN();
  v = JudgeCell(cell);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->accuracy.failed);
}

TEST(JudgeCell, ErrorGrowthIsFlaggedInsideTheTolerancePerPrecision) {
  EXPECT_EQ(ErrorGrowthLimit("fp32"), 2.0);
  EXPECT_EQ(ErrorGrowthLimit("bf16"), 3.0);
  EXPECT_EQ(ErrorGrowthLimit("fp16"), 3.0);
  CellInput cell = Cell(100, 100);
  // 2.5x: flagged for fp32, not for bf16.
  cell.accuracy = AccuracyInput{.baseline_error = 1e-5, .candidate_error = 2.5e-5,
                                .tolerance = 1e-3, .growth_limit = ErrorGrowthLimit("fp32")};
  absl::StatusOr<CellVerdict> v = JudgeCell(cell);
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->accuracy.failed);
  EXPECT_TRUE(v->accuracy.grew);
  EXPECT_NEAR(v->accuracy.growth, 2.5, 1e-12);
  EXPECT_TRUE(v->Failed());
  cell.accuracy->growth_limit = ErrorGrowthLimit("bf16");
  v = JudgeCell(cell);
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->accuracy.grew);
  EXPECT_FALSE(v->Failed());
}

TEST(JudgeSuite, AdjustsAcrossCellsAndKeepsTheOrder) {
  // One cell 2 % slower with a borderline p-value alone; among 20 unchanged cells Holm
  // raises its p-value 20-fold.
  CellInput borderline = Cell(100, 100);
  borderline.config_key = "borderline";
  borderline.baseline = {100, 101, 99, 100.5, 99.5};
  borderline.candidate = {101.5, 102.5, 103, 102, 101.8};
  std::vector<CellInput> cells(20, Cell(100, 100.1));
  cells.insert(cells.begin() + 7, borderline);
  VerdictOptions none;
  none.correction = Correction::kNone;
  absl::StatusOr<CellVerdict> alone = JudgeCell(borderline, none);
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->verdict, Verdict::kRegressed) << alone->why;
  absl::StatusOr<std::vector<CellVerdict>> suite = JudgeSuite(cells);
  ASSERT_TRUE(suite.ok());
  ASSERT_EQ(suite->size(), 21u);
  const CellVerdict& v = (*suite)[7];
  EXPECT_EQ(v.config_key, "borderline");
  EXPECT_NEAR(v.p_slower_adjusted, std::min(1.0, 21 * v.p_slower), 1e-12);
  EXPECT_NE(v.verdict, Verdict::kRegressed) << v.why;
  VerdictOptions bh;
  bh.correction = Correction::kBenjaminiHochberg;
  suite = JudgeSuite(cells, bh);
  ASSERT_TRUE(suite.ok());
  // Step-up: the unchanged cells' common p-value caps it.
  EXPECT_NEAR((*suite)[7].p_slower_adjusted,
              std::min(21 * (*suite)[7].p_slower, (*suite)[0].p_slower), 1e-12);
  // An invalid cell anywhere fails the whole suite.
  cells[3].baseline.clear();
  EXPECT_FALSE(JudgeSuite(cells).ok());
}

TEST(Correction, NamesReadBackAndOthersAreRefused) {
  for (Correction c : {Correction::kNone, Correction::kHolm, Correction::kBenjaminiHochberg}) {
    absl::StatusOr<Correction> read = ParseCorrectionName(CorrectionName(c));
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(*read, c);
  }
  EXPECT_STREQ(CorrectionName(VerdictOptions().correction), "holm");
  EXPECT_TRUE(absl::IsInvalidArgument(ParseCorrectionName("Holm").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseCorrectionName("").status()));
}

TEST(CalibratedNoise, IsTheRootMeanSquareOfTheLogRatios) {
  // Differences of either sign count alike; one comparison is its own |log ratio|.
  absl::StatusOr<double> noise = CalibratedNoise({1.02, 1 / 1.02});
  ASSERT_TRUE(noise.ok());
  EXPECT_NEAR(*noise, std::log(1.02), 1e-12);
  noise = CalibratedNoise({0.97});
  ASSERT_TRUE(noise.ok());
  EXPECT_NEAR(*noise, -std::log(0.97), 1e-12);
  // Every comparison, not only the newest: one large difference among four quiet ones.
  noise = CalibratedNoise({1.0, 1.0, 1.0, 1.25});
  ASSERT_TRUE(noise.ok());
  EXPECT_NEAR(*noise, std::log(1.25) / 2, 1e-12);
  EXPECT_FALSE(CalibratedNoise({}).ok());
  EXPECT_FALSE(CalibratedNoise({1.0, 0.0}).ok());
  EXPECT_FALSE(CalibratedNoise({std::numeric_limits<double>::quiet_NaN()}).ok());
}

TEST(RatioNoise, EstimatesTheSpreadOfTheRatio) {
  // Blocks spread +-1 % evenly: MAD of the logs about 0.006.
  std::vector<double> a, b;
  for (int i = 0; i < 10; ++i) {
    a.push_back(100 * (1 + 0.01 * (i - 4.5) / 4.5));
    b.push_back(100 * (1 + 0.01 * (4.5 - i) / 4.5));
  }
  absl::StatusOr<double> noise = RatioNoise(a, b);
  ASSERT_TRUE(noise.ok());
  EXPECT_GT(*noise, 0.003);
  EXPECT_LT(*noise, 0.006);
  EXPECT_FALSE(RatioNoise({1, 2}, {1, 2, 3}).ok());
}

// A power-capped cell: the clock moves by up to 8 % from round to round, both sides of a round
// alike; the candidate is `factor` slower with 0.2 % of its own noise per block.
CellInput DriftingCell(double factor, int rounds = 10) {
  CellInput cell;
  cell.problem_key = "prefill/b4/hq16/hkv16/q4096/k4096/d128/causal0/bf16";
  cell.config_key = "fused/bm128/bs128/t384/bf16/st2/persistent";
  for (int i = 0; i < rounds; ++i) {
    const double clock = 1 + 0.04 * std::sin(1.3 * i) + 0.04 * ((i * 5) % 3 - 1);
    cell.baseline.push_back(850 * clock * (1 + 0.002 * ((i * 7) % 5 - 2) / 2));
    cell.candidate.push_back(850 * factor * clock * (1 + 0.002 * ((i * 3) % 5 - 2) / 2));
  }
  cell.paired = true;
  auto noise = PairedNoise(cell.baseline, cell.candidate);
  cell.aa_noise = noise.ok() ? *noise : 0;
  return cell;
}

TEST(JudgeCell, PairedRoundsFindAChangeTheClockHidesUnpaired) {
  CellInput paired = DriftingCell(1.03);
  absl::StatusOr<CellVerdict> v = JudgeCell(paired);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->paired);
  EXPECT_EQ(v->verdict, Verdict::kRegressed) << v->why;
  EXPECT_NEAR(v->ratio.pairwise_ratio, 1.03, 0.002);
  EXPECT_NE(v->why.find("paired by round"), std::string::npos);
  // The same blocks unpaired: the clock's spread is the noise, and nothing is decided.
  CellInput unpaired = paired;
  unpaired.paired = false;
  auto noise = RatioNoise(unpaired.baseline, unpaired.candidate);
  ASSERT_TRUE(noise.ok());
  unpaired.aa_noise = *noise;
  absl::StatusOr<CellVerdict> u = JudgeCell(unpaired);
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u->paired);
  EXPECT_NE(u->verdict, Verdict::kRegressed) << u->why;
}

// A few rounds disturbed on one side only, as a compile burst on a shared host: every round's
// ratio falls one way, so the signed-rank test is significant, but the interval spans most of
// the disturbed rounds' spread. It is re-measured, not called; the same rounds without the
// disturbance are called.
TEST(JudgeCell, AnIntervalSpanningSeveralFloorsIsReMeasuredNotCalled) {
  CellInput cell;
  cell.problem_key = "prefill/b2/hq8/hkv2/q64/k128/d64/causal1/fp32";
  cell.config_key = "materialized/bm64/bs64/t2/fp32/st1";
  cell.paired = true;
  const double round_ratio[] = {0.985, 0.99, 0.975, 0.98, 0.45, 0.99, 0.97, 0.5, 0.985, 0.98, 0.55, 0.975, 0.99};
  for (size_t i = 0; i < std::size(round_ratio); ++i) {
    const double base = 100 * (1 + 0.01 * static_cast<double>(i % 3));
    cell.baseline.push_back(base);
    cell.candidate.push_back(base * round_ratio[i]);
  }
  absl::StatusOr<CellVerdict> v = JudgeCell(cell);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_LT(v->p_faster_adjusted, 0.01) << "the test alone would call it";
  EXPECT_LT(v->ratio.pairwise_ratio, 1 / (1 + v->floor)) << v->why;
  EXPECT_GT(std::log(v->ratio.upper / v->ratio.lower), 4 * std::log(1 + v->floor)) << v->why;
  EXPECT_EQ(v->verdict, Verdict::kUnknown) << v->why;
  EXPECT_TRUE(v->remeasure);
  EXPECT_NE(v->why.find("the interval spans more than 4 floors"), std::string::npos) << v->why;

  VerdictOptions loose;
  loose.max_interval_floors = 1000;
  absl::StatusOr<CellVerdict> called = JudgeCell(cell, loose);
  ASSERT_TRUE(called.ok());
  EXPECT_EQ(called->verdict, Verdict::kImproved) << called->why;

  // Without the three disturbed rounds: a narrow interval, called.
  CellInput steady = cell;
  for (size_t i = 0; i < steady.candidate.size(); ++i) {
    if (round_ratio[i] < 0.9) steady.candidate[i] = steady.baseline[i] * 0.98;
  }
  absl::StatusOr<CellVerdict> clean = JudgeCell(steady);
  ASSERT_TRUE(clean.ok());
  EXPECT_EQ(clean->verdict, Verdict::kImproved) << clean->why;

  VerdictOptions bad;
  bad.max_interval_floors = 0;
  EXPECT_EQ(JudgeCell(cell, bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JudgeCell, PairedIdenticalBuildsAreTheSameDespiteTheClock) {
  absl::StatusOr<CellVerdict> v = JudgeCell(DriftingCell(1.0));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->verdict, Verdict::kSame) << v->why;
}

TEST(JudgeCell, PairedCellsNeedEqualBlockCounts) {
  CellInput cell = DriftingCell(1.0);
  cell.candidate.pop_back();
  absl::StatusOr<CellVerdict> v = JudgeCell(cell);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PairedNoise, IsTheSpreadOfThePerRoundRatiosMedian) {
  // Per-round log ratios alternate +-1 %: MAD 1 %, so sigma 1.4826 % and the noise
  // 1.4826 % x sqrt(pi / 2) / sqrt(10).
  std::vector<double> base(10, 100.0), cand;
  for (int i = 0; i < 10; ++i) cand.push_back(100 * std::exp(i % 2 == 0 ? 0.01 : -0.01));
  absl::StatusOr<double> noise = PairedNoise(base, cand);
  ASSERT_TRUE(noise.ok());
  EXPECT_NEAR(*noise, 0.014826 * std::sqrt(M_PI / 2) / std::sqrt(10.0), 1e-9);
  // A common drift does not change it.
  std::vector<double> drift_base, drift_cand;
  for (int i = 0; i < 10; ++i) {
    drift_base.push_back(base[i] * (1 + 0.05 * i));
    drift_cand.push_back(cand[i] * (1 + 0.05 * i));
  }
  absl::StatusOr<double> drifted = PairedNoise(drift_base, drift_cand);
  ASSERT_TRUE(drifted.ok());
  EXPECT_NEAR(*drifted, *noise, 1e-9);
  EXPECT_FALSE(PairedNoise({1, 2}, {1, 2}).ok());
  EXPECT_FALSE(PairedNoise({1, 2, 3}, {1, 2}).ok());
}

TEST(PairedBlocksToResolve, LeavesHolmRoomForTheSmallestPValue) {
  EXPECT_EQ(PairedBlocksToResolve(62, 0.01), 15);  // 2^-15 x 62 = 0.0019 <= 0.01 / 4
  EXPECT_EQ(PairedBlocksToResolve(8, 0.01), 12);
  EXPECT_EQ(PairedBlocksToResolve(1, 0.01), 9);
  EXPECT_EQ(PairedBlocksToResolve(0, 0.01), 9);
  for (int cells : {1, 4, 62, 500}) {
    const int n = PairedBlocksToResolve(cells, 0.01);
    EXPECT_LE(std::ldexp(1.0, -n) * cells, 0.01 / 4) << cells;
    EXPECT_GT(std::ldexp(1.0, -(n - 1)) * cells, 0.01 / 4) << cells;
  }
}

}  // namespace
}  // namespace fusetune::regress
