// The comparison drivers over scripted block sources: what is measured in which order, how
// verdicts come out of blocks, re-measurement, stored baselines and the refusals.
#include "fusetune/regress/compare.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace fusetune::regress {
namespace {

// A source whose blocks come from a seeded lognormal model: `factor(cell name)` scales the
// latency of a cell; `outcome(cell name)` is its verification.
class ScriptedSource : public BlockSource {
 public:
  ScriptedSource(std::string commit, uint64_t seed, std::string device_name = "test")
      : commit_(std::move(commit)), rng_(seed), device_name_(std::move(device_name)) {}

  std::function<double(const std::string&)> factor = [](const std::string&) { return 1.0; };
  std::function<TrialOutcome(const std::string&)> outcome = [](const std::string&) { return TrialOutcome::kOk; };
  // Whether a cell's blocks say they were timed through a CUDA graph.
  std::function<bool(const std::string&)> graphed = [](const std::string&) { return false; };
  double sigma = 0.005;
  double error = 1e-6;
  std::vector<std::string> log;  // "verify <name>" / "block <name>"
  // Shared by the sources of one comparison: blocks of each cell measured so far on any of them;
  // a block measured first in its round (an even count before it) is `first_factor` slower.
  std::map<std::string, int>* blocks_of_cell = nullptr;
  double first_factor = 1.0;
  // Shared by the sources of one comparison: every block of either, in the order measured, as
  // "<commit> <name>"; and the cell of the block before, whose `after(previous cell)` scales
  // this block (what ran just before moves a power-capped kernel's time).
  std::vector<std::string>* order = nullptr;
  std::string* previous = nullptr;
  std::function<double(const std::string&)> after = [](const std::string&) { return 1.0; };

  absl::StatusOr<SourceInfo> Describe() override {
    SourceInfo info;
    info.commit = commit_;
    info.device.backend = "cpu";
    info.device.name = device_name_;
    info.device.arch = "x";
    return info;
  }
  absl::StatusOr<bool> CanRun(const AttentionProblem& p, const KernelConfig& c, std::string* why) override {
    const bool can = outcome(p.Key() + " " + c.Key()) != TrialOutcome::kUnsupported;
    if (!can) *why = "scripted refusal";
    return can;
  }
  absl::StatusOr<CellCheck> Verify(const AttentionProblem& p, const KernelConfig& c) override {
    const std::string name = p.Key() + " " + c.Key();
    log.push_back("verify " + name);
    CellCheck check;
    check.outcome = outcome(name);
    check.message = check.outcome == TrialOutcome::kOk ? "" : "scripted";
    check.max_rel_error = error;
    check.tolerance = 1e-4;
    return check;
  }
  absl::StatusOr<SampleBlock> MeasureBlock(const AttentionProblem& p, const KernelConfig& c) override {
    const std::string name = p.Key() + " " + c.Key();
    log.push_back("block " + name);
    SampleBlock b;
    b.samples = 10;
    b.median_us = 100 * factor(name) * std::exp(sigma * normal_(rng_));
    if (blocks_of_cell != nullptr && (*blocks_of_cell)[name]++ % 2 == 0) b.median_us *= first_factor;
    if (order != nullptr) order->push_back(commit_ + " " + name);
    if (previous != nullptr) {
      b.median_us *= after(*previous);
      *previous = name;
    }
    b.graphed = graphed(name);
    return b;
  }

 private:
  std::string commit_;
  std::mt19937_64 rng_;
  std::normal_distribution<double> normal_;
  std::string device_name_;
};

Suite TwoProblemSuite() {
  Suite s;
  s.name = "test";
  s.blocks = 10;
  for (int q : {64, 128}) {
    for (int bm : {16, 32}) {
      SuiteCell cell;
      cell.problem.q_len = q;
      cell.problem.kv_len = q;
      cell.config.block_m = bm;
      s.cells.push_back(cell);
    }
  }
  return s;
}

std::string NameOf(const SuiteCell& c) { return c.problem.Key() + " " + c.config.Key(); }

TEST(CompareInterleavedTest, AnAACompareOfOneModelFindsNoRegression) {
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, TwoProblemSuite());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->interleaved);
  EXPECT_EQ(c->cells.size(), 4u);
  EXPECT_FALSE(c->AnyFailed());
  EXPECT_EQ(c->CountVerdict(regress::Verdict::kRegressed), 0);
  EXPECT_EQ(c->baseline.commit, "aaaaaaa");
  EXPECT_EQ(c->candidate.commit, "bbbbbbb");
}

TEST(CompareInterleavedTest, EachSideGoesFirstInHalfOfACellsRounds) {
  // The side measured first in a round is 5 % slower (as on the H200, where it was slower in
  // most cells): with each side first in half of the rounds an A/A comparison stays centred.
  Suite suite = TwoProblemSuite();
  std::map<std::string, int> blocks_of_cell;
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  for (ScriptedSource* s : {&base, &cand}) {
    s->blocks_of_cell = &blocks_of_cell;
    s->first_factor = 1.05;
    s->sigma = 0.001;
  }
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, suite);
  ASSERT_TRUE(c.ok()) << c.status();
  // Who went first, per cell, from the two logs' blocks in the order they were measured: the
  // sources log independently, so replay the rounds through the medians (the first-placed
  // block of a round is the slow one).
  for (const CellComparison& cell : c->cells) {
    ASSERT_EQ(cell.baseline.blocks.size(), cell.candidate.blocks.size());
    int base_first = 0, cand_first = 0;
    for (size_t r = 0; r < cell.baseline.blocks.size(); ++r) {
      (cell.baseline.blocks[r].median_us > cell.candidate.blocks[r].median_us ? base_first : cand_first)++;
    }
    EXPECT_LE(std::abs(base_first - cand_first), 1) << cell.cell.Name() << ": " << base_first << " / " << cand_first;
    // Each round's order is recorded with its blocks: one side first, the slow one.
    ASSERT_EQ(cell.baseline.first_in_round.size(), cell.baseline.blocks.size());
    ASSERT_EQ(cell.candidate.first_in_round.size(), cell.candidate.blocks.size());
    for (size_t r = 0; r < cell.baseline.blocks.size(); ++r) {
      EXPECT_NE(cell.baseline.first_in_round[r], cell.candidate.first_in_round[r]);
      EXPECT_EQ(cell.baseline.first_in_round[r], cell.baseline.blocks[r].median_us > cell.candidate.blocks[r].median_us);
    }
    EXPECT_NEAR(cell.verdict.ratio.pairwise_ratio, 1.0, 0.01) << cell.verdict.why;
    EXPECT_NE(cell.verdict.verdict, regress::Verdict::kRegressed) << cell.verdict.why;
    EXPECT_NE(cell.verdict.verdict, regress::Verdict::kImproved) << cell.verdict.why;
  }
}

// One problem of three cells and one of two, measured in mirrored rounds.
Suite MirroredSuite() {
  Suite s = TwoProblemSuite();
  SuiteCell third = s.cells[0];
  third.config.block_s = 32;
  s.cells.insert(s.cells.begin() + 2, third);
  s.round_order = RoundOrder::kMirrored;
  return s;
}

TEST(CompareInterleavedTest, MirroredRoundsMeasureTheCellsInOneOrderOnOneSideThenTheOther) {
  const Suite suite = MirroredSuite();
  std::vector<std::string> order;
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  base.order = cand.order = &order;
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, suite);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->round_order, RoundOrder::kMirrored);
  // Problem by problem: rounds of 2n blocks.
  size_t at = 0;
  std::set<std::vector<std::string>> orders_seen;
  for (size_t problem_cells : {3u, 2u}) {
    const size_t rounds = c->cells[at == 0 ? 0 : 3].baseline.blocks.size();
    std::map<std::string, int> started;  // side -> rounds it went first
    std::string last_cell;
    for (size_t r = 0; r < rounds; ++r, at += 2 * problem_cells) {
      ASSERT_LE(at + 2 * problem_cells, order.size());
      std::vector<std::string> first_half, second_half;
      for (size_t k = 0; k < problem_cells; ++k) {
        const std::string& a = order[at + k];
        const std::string& b = order[at + problem_cells + k];
        EXPECT_EQ(a.substr(0, 7), order[at].substr(0, 7)) << "one side in the first half, round " << r;
        EXPECT_NE(b.substr(0, 7), a.substr(0, 7)) << "the other side in the second half, round " << r;
        first_half.push_back(a.substr(8));
        second_half.push_back(b.substr(8));
      }
      EXPECT_EQ(first_half, second_half) << "the same cell order on both sides, round " << r;
      EXPECT_EQ(std::set<std::string>(first_half.begin(), first_half.end()).size(), problem_cells);
      if (r > 0) EXPECT_EQ(first_half.back(), last_cell) << "the previous round's last cell ends round " << r;
      last_cell = first_half.back();
      ++started[order[at].substr(0, 7)];
      orders_seen.insert(first_half);
    }
    EXPECT_LE(std::abs(started["aaaaaaa"] - started["bbbbbbb"]), 1) << problem_cells << "-cell problem";
  }
  EXPECT_EQ(at, order.size());
  EXPECT_GT(orders_seen.size(), 2u) << "the cells' order is drawn afresh each round";
  for (const CellComparison& cell : c->cells) {
    ASSERT_EQ(cell.baseline.first_in_round.size(), cell.baseline.blocks.size());
    for (size_t r = 0; r < cell.baseline.blocks.size(); ++r) {
      EXPECT_NE(cell.baseline.first_in_round[r], cell.candidate.first_in_round[r]);
    }
  }
  // Each block's place in the measurement is recorded: the shared log's order.
  std::vector<std::string> by_place(order.size());
  for (const CellComparison& cell : c->cells) {
    for (const CellMeasurement* side : {&cell.baseline, &cell.candidate}) {
      ASSERT_EQ(side->sequence.size(), side->blocks.size());
      for (int place : side->sequence) {
        ASSERT_LT(static_cast<size_t>(place), order.size());
        by_place[place] = (side == &cell.baseline ? "aaaaaaa " : "bbbbbbb ") + NameOf(cell.cell);
      }
    }
  }
  EXPECT_EQ(by_place, order);
  absl::StatusOr<Comparison> read = ComparisonFromJson(ComparisonToJson(*c));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->round_order, RoundOrder::kMirrored);
  EXPECT_EQ(read->cells[1].candidate.sequence, c->cells[1].candidate.sequence);
  nlohmann::json doc = nlohmann::json::parse(ComparisonToJson(*c));
  doc["cells"][0]["baseline"]["sequence"] = {1, 2};
  EXPECT_FALSE(ComparisonFromJson(doc.dump()).ok()) << "a place per block";
}

TEST(CompareInterleavedTest, MirroredRoundsTakeOutWhatTheBlockBeforeAdds) {
  // Each block is slower by 0, 3 or 6 % depending on the cell measured just before it, the
  // model of a power-capped GPU where what ran before sets the clock. Both sides of a cell
  // follow the same cell in a mirrored round, so their per-round ratios keep none of it; in a
  // shuffled round they follow different cells as often as not.
  auto median_width = [](RoundOrder round_order) {
    Suite suite = MirroredSuite();
    suite.round_order = round_order;
    std::map<std::string, double> slowdown_after;
    for (size_t i = 0; i < suite.cells.size(); ++i) slowdown_after[NameOf(suite.cells[i])] = 1.0 + 0.03 * (i % 3);
    std::string previous;
    ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
    for (ScriptedSource* s : {&base, &cand}) {
      s->previous = &previous;
      s->after = [&slowdown_after](const std::string& before) {
        auto it = slowdown_after.find(before);
        return it == slowdown_after.end() ? 1.0 : it->second;
      };
      s->sigma = 0.002;
    }
    CompareOptions options;
    options.blocks = 16;
    absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, suite, options);
    EXPECT_TRUE(c.ok()) << c.status();
    std::vector<double> widths;
    for (const CellComparison& cell : c->cells) {
      EXPECT_NE(cell.verdict.verdict, regress::Verdict::kRegressed) << cell.verdict.why;
      EXPECT_NE(cell.verdict.verdict, regress::Verdict::kImproved) << cell.verdict.why;
      widths.push_back(cell.verdict.ratio.upper / cell.verdict.ratio.lower - 1);
    }
    std::sort(widths.begin(), widths.end());
    return widths[widths.size() / 2];
  };
  const double shuffled = median_width(RoundOrder::kShuffled);
  const double mirrored = median_width(RoundOrder::kMirrored);
  EXPECT_LT(mirrored * 3, shuffled) << "median 90 % interval: mirrored " << mirrored << ", shuffled " << shuffled;
}

TEST(CompareInterleavedTest, TheRoundOrderComesFromTheCommandElseTheSuiteElseShuffled) {
  Suite suite = TwoProblemSuite();
  CompareOptions options;
  EXPECT_EQ(EffectiveRoundOrder(suite, options), RoundOrder::kShuffled);
  suite.round_order = RoundOrder::kMirrored;
  EXPECT_EQ(EffectiveRoundOrder(suite, options), RoundOrder::kMirrored);
  options.round_order = RoundOrder::kShuffled;
  EXPECT_EQ(EffectiveRoundOrder(suite, options), RoundOrder::kShuffled);
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, suite, options);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->round_order, RoundOrder::kShuffled);
  // A comparison written before the field existed reads back as shuffled.
  nlohmann::json doc = nlohmann::json::parse(ComparisonToJson(*c));
  doc.erase("round_order");
  absl::StatusOr<Comparison> old = ComparisonFromJson(doc.dump());
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->round_order, RoundOrder::kShuffled);
  doc["round_order"] = "sorted";
  EXPECT_FALSE(ComparisonFromJson(doc.dump()).ok());
}

TEST(CompareInterleavedTest, ASlowerCellIsRegressedAndTheOthersAreNot) {
  Suite suite = TwoProblemSuite();
  const std::string slow = NameOf(suite.cells[2]);
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  cand.factor = [&](const std::string& name) { return name == slow ? 1.10 : 1.0; };
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, suite);
  ASSERT_TRUE(c.ok()) << c.status();
  for (size_t i = 0; i < c->cells.size(); ++i) {
    EXPECT_EQ(c->cells[i].verdict.verdict == regress::Verdict::kRegressed, i == 2) << c->cells[i].verdict.why;
  }
  EXPECT_NEAR(c->cells[2].verdict.ratio.pairwise_ratio, 1.10, 0.02);
  EXPECT_TRUE(c->AnyFailed());
}

// A cell whose sides were timed differently (one through a CUDA graph, one launch by launch) is
// unknown with the reason, however far apart its sides are, and not measured again; cells timed
// alike, through a graph on both sides included, are judged as ever.
TEST(CompareInterleavedTest, ACellWhoseSidesWereTimedDifferentlyIsUnknownWithTheReason) {
  Suite suite = TwoProblemSuite();
  const std::string slower = NameOf(suite.cells[0]), faster = NameOf(suite.cells[1]), both = NameOf(suite.cells[2]);
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  cand.factor = [&](const std::string& name) { return name == slower || name == both ? 1.10 : name == faster ? 0.9 : 1.0; };
  cand.graphed = [&](const std::string& name) { return name == slower || name == faster || name == both; };
  base.graphed = [&](const std::string& name) { return name == both; };
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, suite);
  ASSERT_TRUE(c.ok()) << c.status();
  for (size_t i : {size_t{0}, size_t{1}}) {
    const regress::CellVerdict& v = c->cells[i].verdict;
    EXPECT_EQ(v.verdict, regress::Verdict::kUnknown) << v.why;
    EXPECT_FALSE(v.Failed()) << v.why;
    EXPECT_FALSE(v.remeasure);
    EXPECT_NE(v.why.find("timed differently (the baseline launch by launch, the candidate through a CUDA graph)"),
              std::string::npos)
        << v.why;
    EXPECT_EQ(v.baseline_blocks, v.candidate_blocks);
    EXPECT_EQ(static_cast<size_t>(v.candidate_blocks), c->cells[i].candidate.blocks.size()) << "measured once";
  }
  EXPECT_NEAR(c->cells[0].verdict.ratio.pairwise_ratio, 1.10, 0.02) << "the statistics are still there";
  EXPECT_EQ(c->cells[2].verdict.verdict, regress::Verdict::kRegressed) << c->cells[2].verdict.why;
  EXPECT_NE(c->cells[3].verdict.verdict, regress::Verdict::kRegressed) << c->cells[3].verdict.why;
  EXPECT_EQ(c->cells[3].verdict.why.find("timed differently"), std::string::npos) << c->cells[3].verdict.why;
  EXPECT_EQ(c->CountVerdict(regress::Verdict::kImproved), 0);
}

TEST(CompareInterleavedTest, AKnownAANoiseWidensTheFloorOfItsCellOnly) {
  Suite suite = TwoProblemSuite();
  const std::string biased = NameOf(suite.cells[0]);
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  cand.factor = [&](const std::string& name) { return name == biased ? 1.02 : 1.0; };
  CompareOptions options;
  // The A/A run measured this cell 2 % apart: a 2 % difference is not a regression there.
  options.known_aa_noise = [&](const SuiteCell& cell) {
    return NameOf(cell) == biased ? KnownCellNoise{std::log(1.02), 1} : KnownCellNoise{};
  };
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, suite, options);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NE(c->cells[0].verdict.verdict, regress::Verdict::kRegressed) << c->cells[0].verdict.why;
  EXPECT_NEAR(c->cells[0].verdict.floor, 3 * std::log(1.02), 1e-6);
  EXPECT_LT(c->cells[1].verdict.floor, 0.02);
  // Without it the same difference is a regression.
  ScriptedSource base2("aaaaaaa", 1), cand2("bbbbbbb", 2);
  cand2.factor = cand.factor;
  c = CompareInterleaved(base2, cand2, suite);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->cells[0].verdict.verdict, regress::Verdict::kRegressed) << c->cells[0].verdict.why;
}

TEST(CompareInterleavedTest, CellsAreJudgedOnRoundsPaired) {
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, TwoProblemSuite());
  ASSERT_TRUE(c.ok()) << c.status();
  for (const CellComparison& cell : c->cells) {
    EXPECT_TRUE(cell.verdict.paired);
    EXPECT_EQ(cell.baseline.blocks.size(), cell.candidate.blocks.size());
  }
}

// Both sides quiet (0.05 % per block), the cell named `slow` 1 % slower on the candidate.
Comparison CompareWithOneCellOnePercentSlower(const Suite& suite, const std::string& slow, const CompareOptions& options) {
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  base.sigma = cand.sigma = 0.0005;
  cand.factor = [&](const std::string& name) { return name == slow ? 1.01 : 1.0; };
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, suite, options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : Comparison{};
}

TEST(CompareInterleavedTest, TheSuitesMinFloorSetsTheFloorAndTheOptionWins) {
  Suite suite = TwoProblemSuite();
  const std::string slow = NameOf(suite.cells[1]);
  auto run = [&](const CompareOptions& options) { return CompareWithOneCellOnePercentSlower(suite, slow, options); };
  // The default floor (1.5 %) hides a 1 % change; the suite's 0.5 % does not.
  Comparison c = run({});
  EXPECT_NE(c.cells[1].verdict.verdict, regress::Verdict::kRegressed) << c.cells[1].verdict.why;
  suite.min_floor = 0.005;
  c = run({});
  EXPECT_DOUBLE_EQ(c.cells[0].verdict.floor, 0.005);
  EXPECT_EQ(c.cells[1].verdict.verdict, regress::Verdict::kRegressed) << c.cells[1].verdict.why;
  EXPECT_EQ(c.CountVerdict(regress::Verdict::kRegressed), 1);
  CompareOptions wider;
  wider.min_floor = 0.02;
  c = run(wider);
  EXPECT_DOUBLE_EQ(c.cells[0].verdict.floor, 0.02);
  EXPECT_NE(c.cells[1].verdict.verdict, regress::Verdict::kRegressed);
}

TEST(CompareInterleavedTest, CalibratedCellsTakeTheSuitesCalibratedMinimum) {
  Suite suite = TwoProblemSuite();
  const std::string slow = NameOf(suite.cells[1]);
  auto run = [&](const CompareOptions& options) { return CompareWithOneCellOnePercentSlower(suite, slow, options); };
  // Every cell calibrated by five quiet A/A comparisons.
  CompareOptions calibrated;
  calibrated.known_aa_noise = [](const SuiteCell&) { return KnownCellNoise{0.0005, 5}; };
  Comparison c = run(calibrated);
  EXPECT_NE(c.cells[1].verdict.verdict, regress::Verdict::kRegressed) << "the 1.5 % minimum hides 1 %";
  suite.calibrated_min_floor = 0.005;
  c = run(calibrated);
  EXPECT_DOUBLE_EQ(c.cells[0].verdict.floor, 0.005);
  EXPECT_EQ(c.cells[1].verdict.verdict, regress::Verdict::kRegressed) << c.cells[1].verdict.why;
  EXPECT_EQ(c.CountVerdict(regress::Verdict::kRegressed), 1);
  // Uncalibrated cells keep the minimum of the first night.
  c = run({});
  EXPECT_DOUBLE_EQ(c.cells[0].verdict.floor, 0.015);
  EXPECT_NE(c.cells[1].verdict.verdict, regress::Verdict::kRegressed);
  // The command's option overrides the suite's.
  CompareOptions wider = calibrated;
  wider.calibrated_min_floor = 0.02;
  c = run(wider);
  EXPECT_DOUBLE_EQ(c.cells[0].verdict.floor, 0.02);
}

TEST(CompareInterleavedTest, TheCorrectionComesFromTheCommandElseTheSuiteElseHolm) {
  Suite suite = TwoProblemSuite();
  CompareOptions options;
  EXPECT_EQ(EffectiveVerdictOptions(suite, options).correction, regress::Correction::kHolm);
  suite.correction = regress::Correction::kBenjaminiHochberg;
  EXPECT_EQ(EffectiveVerdictOptions(suite, options).correction, regress::Correction::kBenjaminiHochberg);
  options.correction = regress::Correction::kNone;
  EXPECT_EQ(EffectiveVerdictOptions(suite, options).correction, regress::Correction::kNone);
  // Each cell alone at alpha: the same cells' p-values go unadjusted.
  const std::string slow = NameOf(suite.cells[1]);
  Comparison c = CompareWithOneCellOnePercentSlower(suite, slow, options);
  for (const CellComparison& cell : c.cells) {
    EXPECT_DOUBLE_EQ(cell.verdict.p_slower_adjusted, cell.verdict.p_slower) << NameOf(cell.cell);
  }
}

TEST(CompareInterleavedTest, ATimeBudgetStopsReMeasuringAndSaysSo) {
  const Suite suite = TwoProblemSuite();
  auto run = [&](double budget) {
    ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
    // Every cell slower by about the floor: neither called nor inside it after the first pass.
    base.sigma = cand.sigma = 0.004;
    cand.factor = [](const std::string&) { return 1.015; };
    CompareOptions options;
    options.max_measure_seconds = budget;
    absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, suite, options);
    EXPECT_TRUE(c.ok()) << c.status();
    return *c;
  };
  const size_t first = static_cast<size_t>(std::max(10, regress::PairedBlocksToResolve(4, 0.01)));
  const Comparison unbounded = run(0);
  size_t most = 0;
  for (const CellComparison& c : unbounded.cells) most = std::max(most, c.candidate.blocks.size());
  ASSERT_GT(most, first);  // without a budget, undecided cells were measured again
  const Comparison bounded = run(1e-9);
  int stopped = 0;
  for (const CellComparison& c : bounded.cells) {
    EXPECT_EQ(c.candidate.blocks.size(), first);
    EXPECT_FALSE(c.verdict.remeasure);
    if (c.verdict.why.find("time budget") != std::string::npos) {
      EXPECT_EQ(c.verdict.verdict, regress::Verdict::kUnknown);
      ++stopped;
    }
  }
  EXPECT_GE(stopped, 1);
  CompareOptions bad;
  bad.max_measure_seconds = -1;
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  EXPECT_EQ(CompareInterleaved(base, cand, suite, bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CompareInterleavedTest, TheTimeBudgetComesFromTheCommandElseTheSuiteElseNone) {
  Suite suite = TwoProblemSuite();
  CompareOptions options;
  EXPECT_EQ(EffectiveMaxMeasureSeconds(suite, options), 0);
  suite.max_measure_seconds = 600;
  EXPECT_EQ(EffectiveMaxMeasureSeconds(suite, options), 600);
  options.max_measure_seconds = 0;  // the command's "no budget" wins over the suite's
  EXPECT_EQ(EffectiveMaxMeasureSeconds(suite, options), 0);
  options.max_measure_seconds = 30;
  EXPECT_EQ(EffectiveMaxMeasureSeconds(suite, options), 30);

  // A suite's budget that has run out before the first pass ends stops the re-measuring.
  auto run = [&](std::optional<double> suite_budget, std::optional<double> command_budget) {
    Suite s = TwoProblemSuite();
    s.max_measure_seconds = suite_budget;
    ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
    base.sigma = cand.sigma = 0.004;
    cand.factor = [](const std::string&) { return 1.015; };  // about the floor: undecided at first
    CompareOptions o;
    o.max_measure_seconds = command_budget;
    absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, s, o);
    EXPECT_TRUE(c.ok()) << c.status();
    size_t most = 0;
    for (const CellComparison& cell : c->cells) most = std::max(most, cell.candidate.blocks.size());
    return most;
  };
  const size_t first = static_cast<size_t>(std::max(10, regress::PairedBlocksToResolve(4, 0.01)));
  EXPECT_EQ(run(1e-9, std::nullopt), first);
  EXPECT_GT(run(1e-9, 0.0), first);
  EXPECT_GT(run(std::nullopt, std::nullopt), first);
}

TEST(ComparisonFromJson, ReadsBackWhatWasWrittenAndJudgesItTheSameWay) {
  Suite suite = TwoProblemSuite();
  // A varlen problem: its key holds only a hash of the lengths, so its fields are written too.
  SuiteCell varlen = suite.cells[0];
  varlen.problem.batch = 2;
  varlen.problem.cu_seqlens_q = {0, 40, 64};
  varlen.problem.cu_seqlens_k = {0, 40, 64};
  varlen.problem.q_len = varlen.problem.kv_len = 40;  // the longest sequence
  ASSERT_TRUE(varlen.problem.Validate().ok()) << varlen.problem.Validate();
  suite.cells.push_back(varlen);
  const std::string slow = NameOf(suite.cells[2]);
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  cand.factor = [&](const std::string& name) { return name == slow ? 1.10 : 1.0; };
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, suite);
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<std::string> left_out;
  absl::StatusOr<Comparison> read = ComparisonFromJson(ComparisonToJson(*c), &left_out);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(left_out.empty());
  EXPECT_EQ(read->baseline.commit, "aaaaaaa");
  EXPECT_EQ(read->candidate.device.DeviceClass(), c->candidate.device.DeviceClass());
  EXPECT_TRUE(read->interleaved);
  ASSERT_EQ(read->cells.size(), c->cells.size());
  EXPECT_EQ(read->cells.back().cell.problem.cu_seqlens_q, varlen.problem.cu_seqlens_q);
  EXPECT_FALSE(read->cells[0].candidate.first_in_round.empty());
  for (size_t i = 0; i < c->cells.size(); ++i) {
    EXPECT_EQ(read->cells[i].cell.Name(), c->cells[i].cell.Name());
    EXPECT_EQ(read->cells[i].baseline.Medians(), c->cells[i].baseline.Medians());
    EXPECT_EQ(read->cells[i].candidate.Medians(), c->cells[i].candidate.Medians());
    EXPECT_EQ(read->cells[i].baseline.first_in_round, c->cells[i].baseline.first_in_round);
    EXPECT_DOUBLE_EQ(read->cells[i].verdict.ratio.pairwise_ratio, c->cells[i].verdict.ratio.pairwise_ratio);
  }
  ASSERT_TRUE(JudgeComparison(EffectiveVerdictOptions(suite, {}), {}, *read).ok());
  for (size_t i = 0; i < c->cells.size(); ++i) {
    EXPECT_EQ(read->cells[i].verdict.verdict, c->cells[i].verdict.verdict) << i;
    EXPECT_EQ(read->cells[i].verdict.why, c->cells[i].verdict.why) << i;
  }
  EXPECT_EQ(read->cells[2].verdict.verdict, regress::Verdict::kRegressed);
}

TEST(ComparisonFromJson, LeavesOutACellWhoseProblemCannotBeRebuiltAndRefusesMalformedText) {
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, TwoProblemSuite());
  ASSERT_TRUE(c.ok()) << c.status();
  nlohmann::json doc = nlohmann::json::parse(ComparisonToJson(*c));
  doc["cells"][1]["problem"] = "prefill/b2/varlen-0123456789ab";  // as a build before problem_fields wrote it
  std::vector<std::string> left_out;
  absl::StatusOr<Comparison> read = ComparisonFromJson(doc.dump(), &left_out);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->cells.size(), 3u);
  ASSERT_EQ(left_out.size(), 1u);
  EXPECT_NE(left_out[0].find("cell 1"), std::string::npos) << left_out[0];
  for (const std::string& bad : {std::string("{"), std::string("[]"), std::string(R"({"cells": 3})")}) {
    EXPECT_EQ(ComparisonFromJson(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  doc = nlohmann::json::parse(ComparisonToJson(*c));
  doc["cells"][2]["candidate"]["blocks"][0]["us"] = "fast";
  absl::StatusOr<Comparison> broken = ComparisonFromJson(doc.dump());
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(broken.status().message()).find("cell 2"), std::string::npos) << broken.status();
}

TEST(CompareInterleavedTest, TheJsonHoldsBothSidesBlocksAndTheVerdicts) {
  Suite suite = TwoProblemSuite();
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, suite);
  ASSERT_TRUE(c.ok()) << c.status();
  const nlohmann::json doc = nlohmann::json::parse(ComparisonToJson(*c));
  EXPECT_EQ(doc["baseline"]["commit"], "aaaaaaa");
  EXPECT_EQ(doc["candidate"]["commit"], "bbbbbbb");
  EXPECT_TRUE(doc["interleaved"].get<bool>());
  ASSERT_EQ(doc["cells"].size(), suite.cells.size());
  for (size_t i = 0; i < suite.cells.size(); ++i) {
    const nlohmann::json& cell = doc["cells"][i];
    EXPECT_EQ(cell["problem"], suite.cells[i].problem.Key());
    EXPECT_EQ(cell["config"], suite.cells[i].config.Key());
    EXPECT_EQ(cell["verdict"]["verdict"], regress::VerdictName(c->cells[i].verdict.verdict));
    EXPECT_DOUBLE_EQ(cell["verdict"]["ratio"].get<double>(), c->cells[i].verdict.ratio.pairwise_ratio);
    ASSERT_EQ(cell["baseline"]["blocks"].size(), c->cells[i].baseline.blocks.size());
    ASSERT_EQ(cell["candidate"]["blocks"].size(), c->cells[i].candidate.blocks.size());
    EXPECT_DOUBLE_EQ(cell["candidate"]["blocks"][0]["us"].get<double>(), c->cells[i].candidate.blocks[0].median_us);
    EXPECT_EQ(cell["baseline"]["check"]["outcome"], "ok");
  }
}

TEST(CompareInterleavedTest, AProblemsCellsAreVerifiedOnBothSidesBeforeItsBlocks) {
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  const Suite suite = TwoProblemSuite();
  ASSERT_TRUE(CompareInterleaved(base, cand, suite).ok());
  // The first pass of a paired comparison of four cells: enough rounds for the test to resolve.
  const size_t n = static_cast<size_t>(std::max(10, regress::PairedBlocksToResolve(4, 0.01)));
  ASSERT_EQ(n, 11u);
  for (ScriptedSource* s : {&base, &cand}) {
    // Per problem (two cells each): two verifications, then its 2 x n blocks.
    ASSERT_EQ(s->log.size(), 2u * (2 + 2 * n));
    const size_t per_group = 2 + 2 * n;
    for (size_t group = 0; group < 2; ++group) {
      for (size_t k = 0; k < per_group; ++k) {
        EXPECT_EQ(s->log[group * per_group + k].rfind(k < 2 ? "verify" : "block", 0), 0u)
            << s->log[group * per_group + k];
      }
    }
  }
}

TEST(CompareInterleavedTest, RoundsAcrossProblemsMeasureEveryProblemEachRound) {
  // Each source then holds a problem's inputs for one round at a time: a fresh preparation
  // (and fresh buffers) every round.
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  Suite suite = TwoProblemSuite();
  suite.rounds_across_problems = true;
  const std::string first_problem = suite.cells[0].problem.Key();
  ASSERT_TRUE(CompareInterleaved(base, cand, suite).ok());
  for (ScriptedSource* s : {&base, &cand}) {
    // Every cell verified first, then per round two blocks of each problem in turn (11 rounds:
    // PairedBlocksToResolve of four cells).
    ASSERT_EQ(s->log.size(), 4u + 4u * 11);
    for (size_t k = 0; k < 4; ++k) EXPECT_EQ(s->log[k].rfind("verify", 0), 0u) << s->log[k];
    for (size_t k = 4; k < s->log.size(); ++k) {
      const bool first = s->log[k].find(first_problem + " ") != std::string::npos;
      EXPECT_EQ(first, (k - 4) / 2 % 2 == 0) << k << ": " << s->log[k];
    }
  }
}

TEST(CompareInterleavedTest, ACellTooNoisyToResolveIsUnknownWithTheReason) {
  // Blocks spread 15 %: even at the block cap the floor is wider than a "same" may hide.
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  base.sigma = cand.sigma = 0.15;
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, TwoProblemSuite());
  ASSERT_TRUE(c.ok()) << c.status();
  for (const CellComparison& cell : c->cells) {
    EXPECT_EQ(cell.verdict.verdict, regress::Verdict::kUnknown) << cell.verdict.why;
    EXPECT_GT(cell.verdict.floor, regress::VerdictOptions{}.max_floor);
    EXPECT_EQ(cell.candidate.blocks.size(), 40u);
    EXPECT_NE(cell.verdict.why.find("cannot resolve"), std::string::npos) << cell.verdict.why;
  }
  EXPECT_FALSE(c->AnyFailed());
}

TEST(CompareInterleavedTest, UndecidedCellsAreMeasuredAgainUpToTheCap) {
  Suite suite = TwoProblemSuite();
  const std::string slow = NameOf(suite.cells[0]);
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  // Right at the floor with wide noise: the first pass cannot decide.
  base.sigma = cand.sigma = 0.03;
  cand.factor = [&](const std::string& name) { return name == slow ? 1.015 : 1.0; };
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, suite);
  ASSERT_TRUE(c.ok()) << c.status();
  int more = 0;
  for (const CellComparison& cell : c->cells) {
    EXPECT_LE(cell.candidate.blocks.size(), 40u);
    EXPECT_EQ(cell.candidate.blocks.size(), cell.baseline.blocks.size());
    more += cell.candidate.blocks.size() > 10 ? 1 : 0;
  }
  EXPECT_GT(more, 0);
}

TEST(CompareInterleavedTest, OtherDeviceClassesAreRefused) {
  ScriptedSource base("aaaaaaa", 1, "one"), cand("bbbbbbb", 2, "other");
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, TwoProblemSuite());
  EXPECT_TRUE(absl::IsFailedPrecondition(c.status())) << c.status();
  EXPECT_TRUE(base.log.empty());
}

TEST(CompareInterleavedTest, ASuiteForAnotherDeviceIsRefused) {
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  Suite suite = TwoProblemSuite();
  suite.device_class = "cuda/NVIDIA-H200/sm90";
  EXPECT_TRUE(absl::IsFailedPrecondition(CompareInterleaved(base, cand, suite).status()));
}

TEST(CompareInterleavedTest, ACellNoSideCanRunFailsBeforeAnyBlock) {
  Suite suite = TwoProblemSuite();
  const std::string refused = NameOf(suite.cells[1]);
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  auto outcome = [&](const std::string& name) { return name == refused ? TrialOutcome::kUnsupported : TrialOutcome::kOk; };
  base.outcome = cand.outcome = outcome;
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, suite);
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
  EXPECT_NE(c.status().message().find("scripted refusal"), std::string::npos) << c.status();
  EXPECT_TRUE(cand.log.empty());  // nothing verified (no inputs prepared), nothing timed
}

TEST(CompareInterleavedTest, ACellTheCandidateNoLongerRunsIsRegressed) {
  Suite suite = TwoProblemSuite();
  const std::string broken = NameOf(suite.cells[3]);
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  cand.outcome = [&](const std::string& name) { return name == broken ? TrialOutcome::kLaunchFailed : TrialOutcome::kOk; };
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, suite);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->cells[3].verdict.verdict, regress::Verdict::kRegressed);
  EXPECT_TRUE(c->cells[3].candidate.blocks.empty());
}

TEST(CompareInterleavedTest, AVerificationFailureOfTheCandidateFailsOnAccuracy) {
  Suite suite = TwoProblemSuite();
  const std::string wrong = NameOf(suite.cells[0]);
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  cand.outcome = [&](const std::string& name) { return name == wrong ? TrialOutcome::kVerifyFailed : TrialOutcome::kOk; };
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, suite);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->cells[0].verdict.accuracy.failed);
  EXPECT_TRUE(c->cells[0].verdict.Failed());
}

TEST(CompareInterleavedTest, ErrorGrowthInsideTheToleranceIsFlagged) {
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  base.error = 1e-6;
  cand.error = 5e-6;  // 5x, under the 1e-4 tolerance; fp32 flags growth above 2x
  absl::StatusOr<Comparison> c = CompareInterleaved(base, cand, TwoProblemSuite());
  ASSERT_TRUE(c.ok()) << c.status();
  for (const CellComparison& cell : c->cells) {
    EXPECT_TRUE(cell.verdict.accuracy.grew);
    EXPECT_FALSE(cell.verdict.accuracy.failed);
  }
}

TEST(CompareInterleavedTest, APickCellRunsTheOldPickOnTheBaselineAndTheNewOnTheCandidate) {
  Suite suite = TwoProblemSuite();
  suite.cells.resize(1);
  SuiteCell pick = suite.cells[0];
  pick.role = "pick";
  pick.config.block_m = 64;
  pick.baseline_config = suite.cells[0].config;
  suite.cells.push_back(pick);
  ScriptedSource base("aaaaaaa", 1), cand("bbbbbbb", 2);
  ASSERT_TRUE(CompareInterleaved(base, cand, suite).ok());
  const std::string old_name = NameOf(suite.cells[0]);
  const std::string new_name = pick.problem.Key() + " " + pick.config.Key();
  for (const std::string& line : base.log) EXPECT_EQ(line.find(new_name), std::string::npos) << line;
  bool candidate_ran_new = false;
  for (const std::string& line : cand.log) candidate_ran_new = candidate_ran_new || line == "block " + new_name;
  EXPECT_TRUE(candidate_ran_new);
  (void)old_name;
}

std::vector<StoredCell> StoredOf(const Suite& suite, uint64_t seed, double factor = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<StoredCell> out;
  for (const SuiteCell& cell : suite.cells) {
    StoredCell s;
    s.problem_key = cell.problem.Key();
    s.config_key = cell.config.Key();
    s.role = cell.role;
    s.measurement.check.max_rel_error = 1e-6;
    s.measurement.check.tolerance = 1e-4;
    for (int i = 0; i < 10; ++i) {
      SampleBlock b;
      b.samples = 10;
      b.median_us = 100 * factor * std::exp(0.005 * normal(rng));
      s.measurement.blocks.push_back(b);
    }
    out.push_back(s);
  }
  return out;
}

TEST(CompareWithStoredTest, UsesTheWiderFloor) {
  const Suite suite = TwoProblemSuite();
  ScriptedSource cand("bbbbbbb", 2);
  // 2 % slower: above the interleaved floor (1.5 %), below the stored one (3 %).
  cand.factor = [](const std::string&) { return 1.02; };
  SourceInfo base_info = *ScriptedSource("aaaaaaa", 1).Describe();
  absl::StatusOr<Comparison> c = CompareWithStored(base_info, StoredOf(suite, 7), cand, suite);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->interleaved);
  for (const CellComparison& cell : c->cells) {
    EXPECT_NE(cell.verdict.verdict, regress::Verdict::kRegressed) << cell.verdict.why;
    EXPECT_GE(cell.verdict.floor, 0.03);
  }
  cand.factor = [](const std::string&) { return 1.08; };
  c = CompareWithStored(base_info, StoredOf(suite, 7), cand, suite);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->CountVerdict(regress::Verdict::kRegressed), 4);
}

TEST(CompareWithStoredTest, AStoredSideTimedOtherwiseIsUnknown) {
  const Suite suite = TwoProblemSuite();
  ScriptedSource cand("bbbbbbb", 2);
  cand.factor = [](const std::string&) { return 1.08; };
  cand.graphed = [](const std::string&) { return true; };
  std::vector<StoredCell> stored = StoredOf(suite, 7);
  // The first cell's stored blocks were graph-timed too: that cell compares.
  for (SampleBlock& b : stored[0].measurement.blocks) b.graphed = true;
  absl::StatusOr<Comparison> c = CompareWithStored(*ScriptedSource("aaaaaaa", 1).Describe(), stored, cand, suite);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->cells[0].verdict.verdict, regress::Verdict::kRegressed) << c->cells[0].verdict.why;
  for (size_t i = 1; i < c->cells.size(); ++i) {
    EXPECT_EQ(c->cells[i].verdict.verdict, regress::Verdict::kUnknown) << c->cells[i].verdict.why;
    EXPECT_NE(c->cells[i].verdict.why.find("the baseline launch by launch, the candidate through a CUDA graph"),
              std::string::npos)
        << c->cells[i].verdict.why;
  }
}

TEST(CompareWithStoredTest, ACellTheBaselineDidNotMeasureIsUnknown) {
  Suite suite = TwoProblemSuite();
  std::vector<StoredCell> stored = StoredOf(suite, 7);
  stored.pop_back();
  ScriptedSource cand("bbbbbbb", 2);
  absl::StatusOr<Comparison> c = CompareWithStored(*ScriptedSource("aaaaaaa", 1).Describe(), stored, cand, suite);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->cells[3].verdict.verdict, regress::Verdict::kUnknown);
  EXPECT_FALSE(c->cells[3].verdict.Failed());
  EXPECT_NE(c->cells[3].verdict.why.find("did not measure"), std::string::npos) << c->cells[3].verdict.why;
}

TEST(MeasureSuiteTest, MeasuresEveryCellTheSuitesBlockCount) {
  ScriptedSource source("aaaaaaa", 1);
  absl::StatusOr<std::vector<MeasuredCell>> cells = MeasureSuite(source, TwoProblemSuite());
  ASSERT_TRUE(cells.ok()) << cells.status();
  ASSERT_EQ(cells->size(), 4u);
  for (const MeasuredCell& c : *cells) EXPECT_EQ(c.measurement.blocks.size(), 10u);
}

TEST(MeasureSuiteTest, AnUnsupportedCellIsAnErrorBeforeAnyBlock) {
  Suite suite = TwoProblemSuite();
  const std::string refused = NameOf(suite.cells[2]);
  ScriptedSource source("aaaaaaa", 1);
  source.outcome = [&](const std::string& name) { return name == refused ? TrialOutcome::kUnsupported : TrialOutcome::kOk; };
  EXPECT_TRUE(absl::IsInvalidArgument(MeasureSuite(source, suite).status()));
  EXPECT_TRUE(source.log.empty());
}

TEST(MeasureSuiteTest, CancelStopsWithCancelled) {
  ScriptedSource source("aaaaaaa", 1);
  std::atomic<bool> cancel{true};
  CompareOptions options;
  options.cancel = &cancel;
  EXPECT_TRUE(absl::IsCancelled(MeasureSuite(source, TwoProblemSuite(), options).status()));
}

}  // namespace
}  // namespace fusetune::regress
