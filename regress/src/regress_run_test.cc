#include "fusetune/regress/regress_run.h"

#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fusetune/records/commit.h"
#include "fusetune/regress/verdict.h"
#include "testing/store_fixtures.h"

namespace fusetune::regress {
namespace {

using testing::CpuDevice;
using testing::kCommitA;
using testing::kCommitB;
using testing::kCommitC;
using testing::kConfigA;
using testing::kConfigB;
using testing::kProblemKey;
using testing::kSuiteName;
using testing::LatencyRow;
using testing::MeasuredBenchCell;
using testing::MemoryStore;
using testing::RecordBenchRun;

Suite TestSuite() {
  Suite suite;
  suite.name = kSuiteName;
  SuiteCell cell;
  cell.problem = *AttentionProblem::FromKey(kProblemKey);
  cell.config = *KernelConfig::FromKey(kConfigA);
  suite.cells.push_back(cell);
  return suite;
}

SourceInfo Candidate(const std::string& commit, const DeviceInfo& device = CpuDevice()) {
  return SourceInfo{commit, device, ""};
}

RegressOptions Options(const std::string& baseline) {
  RegressOptions o;
  o.baseline = baseline;
  o.db = "test.db";
  return o;
}

CellComparison Cell(Verdict verdict, bool accuracy_failed = false) {
  CellComparison c;
  c.verdict.verdict = verdict;
  c.verdict.why = "ratio 1.0153 [1.0101, 1.0210], floor 1.50%";
  c.verdict.remeasure = verdict == Verdict::kUnknown;
  c.verdict.accuracy.checked = true;
  c.verdict.accuracy.failed = accuracy_failed;
  return c;
}

// The first A/A run of a suite on a launch-bound cell once called it regressed (ratio 1.0153
// against a 1.5 % floor): a calibration reports such a difference as the host's noise.
TEST(ReportCalibrationDifferencesAsUnknown, CallsNoCellRegressedOrImprovedAndSaysWhy) {
  Comparison c;
  c.cells = {Cell(Verdict::kRegressed), Cell(Verdict::kImproved), Cell(Verdict::kSame),
             Cell(Verdict::kUnknown), Cell(Verdict::kSame, /*accuracy_failed=*/true)};
  EXPECT_EQ(ReportCalibrationDifferencesAsUnknown(c), 2);
  EXPECT_EQ(c.cells[0].verdict.verdict, Verdict::kUnknown);
  EXPECT_EQ(c.cells[1].verdict.verdict, Verdict::kUnknown);
  EXPECT_EQ(c.cells[2].verdict.verdict, Verdict::kSame);
  EXPECT_EQ(c.cells[3].verdict.verdict, Verdict::kUnknown);
  for (int i : {0, 1}) {
    EXPECT_NE(c.cells[i].verdict.why.find("between-process noise"), std::string::npos) << c.cells[i].verdict.why;
    EXPECT_NE(c.cells[i].verdict.why.find("ratio 1.0153"), std::string::npos) << "the numbers stay";
    EXPECT_FALSE(c.cells[i].verdict.remeasure);
  }
  EXPECT_EQ(c.CountVerdict(Verdict::kRegressed), 0);
  EXPECT_FALSE(c.cells[0].verdict.Failed());
  EXPECT_TRUE(c.cells[4].verdict.Failed()) << "an accuracy failure is not the host's noise";
}

TEST(ResolveBaseline, PreviousIsTheNewestRunAtAnotherCommit) {
  auto store = MemoryStore();
  const int64_t a = RecordBenchRun(*store, kCommitA, {MeasuredBenchCell(kProblemKey, kConfigA, {10, 11, 12})});
  RecordBenchRun(*store, kCommitB, {MeasuredBenchCell(kProblemKey, kConfigA, {10, 11, 12})});
  absl::StatusOr<Baseline> b = ResolveBaseline(Options("previous"), store.get(), TestSuite(), Candidate(kCommitB));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->commit, kCommitA) << "the candidate's own run is never its baseline";
  ASSERT_TRUE(b->run.has_value());
  EXPECT_EQ(b->run->run_id, a);
  EXPECT_EQ(b->binary, "");
}

TEST(ResolveBaseline, PreviousWithoutDatabaseOrOtherRunIsNotFound) {
  EXPECT_TRUE(absl::IsNotFound(ResolveBaseline(Options("previous"), nullptr, TestSuite(), Candidate(kCommitB)).status()));
  auto store = MemoryStore();
  RecordBenchRun(*store, kCommitB, {MeasuredBenchCell(kProblemKey, kConfigA, {10, 11, 12})});
  absl::StatusOr<Baseline> b = ResolveBaseline(Options("previous"), store.get(), TestSuite(), Candidate(kCommitB));
  ASSERT_TRUE(absl::IsNotFound(b.status())) << b.status();
  EXPECT_NE(b.status().message().find("at a commit other than"), std::string::npos) << b.status();
}

TEST(ResolveBaseline, AbbreviationResolvesAgainstTheStoredRuns) {
  auto store = MemoryStore();
  const int64_t a = RecordBenchRun(*store, kCommitA, {MeasuredBenchCell(kProblemKey, kConfigA, {10, 11, 12})});
  absl::StatusOr<Baseline> b = ResolveBaseline(Options("aaaaaaa"), store.get(), TestSuite(), Candidate(kCommitB));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->commit, kCommitA);
  ASSERT_TRUE(b->run.has_value());
  EXPECT_EQ(b->run->run_id, a);
}

TEST(ResolveBaseline, RunOnAnotherDeviceClassOnlyIsAFailedPrecondition) {
  auto store = MemoryStore();
  RecordBenchRun(*store, kCommitA, {MeasuredBenchCell(kProblemKey, kConfigA, {10, 11, 12})}, CpuDevice("Other CPU"));
  absl::StatusOr<Baseline> b = ResolveBaseline(Options(kCommitA), store.get(), TestSuite(), Candidate(kCommitB));
  ASSERT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition) << b.status();
  EXPECT_NE(b.status().message().find("only the same device class compares"), std::string::npos);
}

TEST(ResolveBaseline, KeptBuildIsTheBaselineBinaryWithoutADatabase) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("regress_run_test_" + std::to_string(getpid()));
  const std::filesystem::path bin = dir / kCommitA / "bin";
  std::filesystem::create_directories(bin);
  { std::ofstream(bin / "fusetune") << "#!/bin/sh\n"; }
  chmod((bin / "fusetune").c_str(), 0755);
  RegressOptions o = Options(kCommitA);
  o.builds_dir = dir.string();
  EXPECT_EQ(BuildsInDir(o.builds_dir).size(), 1u);
  absl::StatusOr<Baseline> b = ResolveBaseline(o, nullptr, TestSuite(), Candidate(kCommitB));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->binary, (bin / "fusetune").string());
  EXPECT_FALSE(b->run.has_value());
  o.baseline = kCommitC;
  EXPECT_TRUE(absl::IsNotFound(ResolveBaseline(o, nullptr, TestSuite(), Candidate(kCommitB)).status()))
      << "neither stored nor built";
  std::filesystem::remove_all(dir);
}

TEST(KnownAANoise, ComesFromCalibrationRowsOfTheDeviceClassOnly) {
  auto store = MemoryStore();
  const std::string device_class = CpuDevice().DeviceClass();
  KnownNoise none = KnownAANoise(store.get(), device_class);
  EXPECT_TRUE(none.noise.empty());
  EXPECT_NE(none.note.find("no A/A calibration"), std::string::npos);
  std::vector<Regression> rows = {
      LatencyRow(kCommitA, kCommitA, device_class, kProblemKey, kConfigA, 1.02),
      LatencyRow(kCommitB, kCommitB, device_class, kProblemKey, kConfigA, 0.99),
      // Not calibrations: a comparison of two commits, another device class, another metric.
      LatencyRow(kCommitB, kCommitA, device_class, kProblemKey, kConfigB, 1.5),
      LatencyRow(kCommitA, kCommitA, CpuDevice("Other CPU").DeviceClass(), kProblemKey, kConfigB, 1.5),
  };
  Regression accuracy = LatencyRow(kCommitA, kCommitA, device_class, kProblemKey, kConfigB, 1.5);
  accuracy.metric = "max_rel_error";
  rows.push_back(accuracy);
  ASSERT_TRUE(store->RecordRegressions(rows).ok());
  KnownNoise known = KnownAANoise(store.get(), device_class);
  ASSERT_EQ(known.noise.size(), 1u);
  const std::string cell = std::string(kProblemKey) + " " + kConfigA;
  ASSERT_EQ(known.noise.count(cell), 1u);
  EXPECT_DOUBLE_EQ(known.noise[cell].noise, *CalibratedNoise({0.99, 1.02}));
  EXPECT_GT(known.noise[cell].noise, 0);
  EXPECT_EQ(known.noise[cell].calibrations, 2);
  EXPECT_NE(known.note.find("1 cell(s), from up to 2 calibration(s)"), std::string::npos) << known.note;
  EXPECT_NE(known.note.find(kCommitB), std::string::npos) << "the newest calibration is named: " << known.note;
}

TEST(KnownAANoise, TakesTheNewestCalibrationsPerCellOnly) {
  auto store = MemoryStore();
  const std::string device_class = CpuDevice().DeviceClass();
  std::vector<Regression> rows;
  // Two old, wild calibrations, then kCalibrationsPerCell calm ones (stored later: newer).
  for (int i = 0; i < 2; ++i) rows.push_back(LatencyRow(kCommitA, kCommitA, device_class, kProblemKey, kConfigA, 1.5));
  std::vector<double> newest;
  for (size_t i = 0; i < kCalibrationsPerCell; ++i) {
    const double ratio = i % 2 == 0 ? 1.01 : 0.995;
    rows.push_back(LatencyRow(kCommitB, kCommitB, device_class, kProblemKey, kConfigA, ratio));
    newest.push_back(ratio);
  }
  ASSERT_TRUE(store->RecordRegressions(rows).ok());
  KnownNoise known = KnownAANoise(store.get(), device_class);
  ASSERT_EQ(known.noise.size(), 1u);
  EXPECT_NEAR(known.noise.begin()->second.noise, *CalibratedNoise(newest), 1e-12);
  EXPECT_EQ(known.noise.begin()->second.calibrations, static_cast<int>(kCalibrationsPerCell));
}

TEST(CalibrationOf, TakesTheNewestRatiosOfEachCellAndCountsThem) {
  std::map<std::string, std::vector<double>> ratios;
  ratios["a"] = {1.01, 0.99};
  for (size_t i = 0; i < kCalibrationsPerCell + 3; ++i) ratios["b"].push_back(i < kCalibrationsPerCell ? 1.002 : 1.5);
  ratios["c"] = {};
  const std::map<std::string, KnownCellNoise> known = CalibrationOf(ratios);
  ASSERT_EQ(known.size(), 2u);
  EXPECT_DOUBLE_EQ(known.at("a").noise, *CalibratedNoise({1.01, 0.99}));
  EXPECT_EQ(known.at("a").calibrations, 2);
  EXPECT_NEAR(known.at("b").noise, std::log(1.002), 1e-12) << "the older, wild ratios are past the newest ten";
  EXPECT_EQ(known.at("b").calibrations, static_cast<int>(kCalibrationsPerCell));
}

TEST(AARatiosOf, CollectsEachComparisonsRatioPerCellInOrder) {
  Comparison first, second;
  CellComparison cell;
  cell.cell = TestSuite().cells[0];
  cell.verdict.ratio.pairwise_ratio = 1.01;
  first.cells.push_back(cell);
  cell.verdict.ratio.pairwise_ratio = std::numeric_limits<double>::quiet_NaN();  // too few blocks: no ratio
  first.cells.push_back(cell);
  cell.verdict.ratio.pairwise_ratio = 0.98;
  second.cells.push_back(cell);
  const auto ratios = AARatiosOf({first, second});
  ASSERT_EQ(ratios.size(), 1u);
  EXPECT_EQ(ratios.begin()->first, cell.cell.problem.Key() + " " + cell.cell.config.Key());
  EXPECT_EQ(ratios.begin()->second, (std::vector<double>{1.01, 0.98}));
}

TEST(ComparisonOptions, LooksUpTheCellsNoiseByItsBaselineConfig) {
  auto store = MemoryStore();
  const std::string device_class = CpuDevice().DeviceClass();
  ASSERT_TRUE(store->RecordRegressions({LatencyRow(kCommitA, kCommitA, device_class, kProblemKey, kConfigA, 1.03)}).ok());
  std::vector<std::string> notes;
  RegressOptions o = Options(kCommitA);
  o.blocks = 7;
  o.stored_floor = 0.05;
  const CompareOptions options = ComparisonOptions(o, store.get(), device_class, /*one_process=*/false, nullptr, &notes);
  EXPECT_EQ(options.blocks, 7);
  EXPECT_DOUBLE_EQ(options.stored_min_floor, 0.05);
  ASSERT_EQ(notes.size(), 1u);
  SuiteCell pick = TestSuite().cells[0];
  pick.config = *KernelConfig::FromKey(kConfigB);
  pick.baseline_config = *KernelConfig::FromKey(kConfigA);
  EXPECT_GT(options.known_aa_noise(pick).noise, 0) << "a pick cell's noise is its baseline config's";
  EXPECT_GE(options.known_aa_noise(pick).calibrations, 1);
  SuiteCell other = pick;
  other.baseline_config.reset();
  EXPECT_EQ(options.known_aa_noise(other).noise, 0);
  EXPECT_EQ(options.known_aa_noise(other).calibrations, 0);
}

TEST(AddChangedPicks, AddsAPickCellOnlyForABestConfigRetunedAtTheCandidate) {
  auto store = MemoryStore();
  const int64_t run = RecordBenchRun(*store, kCommitB, {MeasuredBenchCell(kProblemKey, kConfigB, {5, 5, 5})});
  BestConfig best;
  best.device_class = CpuDevice().DeviceClass();
  best.problem_key = kProblemKey;
  best.config_key = kConfigB;
  best.median_us = 5;
  best.run_id = run;
  best.commit = kCommitB;
  ASSERT_TRUE(store->UpsertBestConfig(best).ok());

  Suite at_other = TestSuite();
  EXPECT_TRUE(AddChangedPicks(*store, best.device_class, kCommitC, at_other).empty());
  EXPECT_EQ(at_other.cells.size(), 1u) << "re-tuned at another commit: not the candidate's pick";

  Suite suite = TestSuite();
  std::vector<std::string> notes = AddChangedPicks(*store, best.device_class, kCommitB, suite);
  ASSERT_EQ(suite.cells.size(), 2u);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find(kConfigB), std::string::npos) << notes[0];
  const SuiteCell& pick = suite.cells[1];
  EXPECT_EQ(pick.role, "pick");
  EXPECT_EQ(pick.config.Key(), kConfigB);
  ASSERT_TRUE(pick.baseline_config.has_value());
  EXPECT_EQ(pick.baseline_config->Key(), kConfigA);
}

Comparison TimedComparison(const std::string& baseline, const std::string& candidate) {
  Comparison c;
  c.baseline = Candidate(baseline);
  c.candidate = Candidate(candidate);
  CellComparison cell = Cell(Verdict::kRegressed);
  cell.cell = TestSuite().cells[0];
  cell.verdict.ratio.pairwise_ratio = 1.2;
  cell.verdict.p_slower_adjusted = 0.001;
  cell.verdict.p_faster_adjusted = 0.999;
  cell.verdict.accuracy.growth = 1.5;
  cell.candidate.blocks = {{50, 12, {}, {}, false}, {50, 12.5, {}, {}, false}};
  c.cells.push_back(cell);
  return c;
}

TEST(IsCalibration, SameCommitAndNothingPlanted) {
  RegressOptions o = Options(kCommitA);
  EXPECT_TRUE(IsCalibration(o, TimedComparison(kCommitA, kCommitA)));
  EXPECT_FALSE(IsCalibration(o, TimedComparison(kCommitA, kCommitB)));
  o.plant_slowdowns = {"bm16=0.05"};
  EXPECT_FALSE(IsCalibration(o, TimedComparison(kCommitA, kCommitA))) << "a planted run checks the method";
}

TEST(RegressionRows, LatencyAndAccuracyRowsWithTheLeaningPValue) {
  std::vector<Regression> rows = RegressionRows(TimedComparison(kCommitA, kCommitB), /*planted=*/false);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].metric, kLatencyMetric);
  EXPECT_EQ(rows[0].commit, kCommitB);
  EXPECT_EQ(rows[0].baseline_commit, kCommitA);
  EXPECT_DOUBLE_EQ(rows[0].ratio, 1.2);
  EXPECT_DOUBLE_EQ(rows[0].p_value, 0.001) << "slower: the p-value of 'slower'";
  EXPECT_EQ(rows[0].verdict, "regressed");
  EXPECT_EQ(rows[1].metric, "max_rel_error");
  EXPECT_DOUBLE_EQ(rows[1].ratio, 1.5);
  EXPECT_EQ(RegressionRows(TimedComparison(kCommitA, kCommitB), /*planted=*/true)[0].metric, "planted_latency");
  Comparison pick = TimedComparison(kCommitA, kCommitB);
  pick.cells[0].cell.baseline_config = *KernelConfig::FromKey(kConfigB);
  EXPECT_EQ(RegressionRows(pick, false)[0].metric, "latency_vs_previous_pick");
}

TEST(RegressionRows, AnAARunInOneProcessIsNotACalibrationOfTwo) {
  Comparison aa = TimedComparison(kCommitA, kCommitA);
  aa.one_process = true;
  EXPECT_EQ(RegressionRows(aa, false)[0].metric, kOneProcessCalibrationMetric);
  Comparison change = TimedComparison(kCommitA, kCommitB);
  change.one_process = true;
  EXPECT_EQ(RegressionRows(change, false)[0].metric, kLatencyMetric) << "a change is a latency row however measured";
  // Each arrangement reads its own calibrations.
  std::unique_ptr<Store> store = MemoryStore();
  ASSERT_TRUE(store->RecordRegressions(RegressionRows(aa, false)).ok());
  EXPECT_TRUE(KnownAANoise(store.get(), CpuDevice().DeviceClass()).noise.empty());
  const KnownNoise one = KnownAANoise(store.get(), CpuDevice().DeviceClass(), kOneProcessCalibrationMetric);
  ASSERT_EQ(one.noise.size(), 1u);
  EXPECT_NEAR(one.noise.begin()->second.noise, std::log(1.2), 1e-12);
  EXPECT_NE(one.note.find("one-process A/A noise of 1 cell(s)"), std::string::npos) << one.note;
}

// A file that exists, for the layouts below.
void Touch(const std::filesystem::path& path) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << "x";
}

TEST(CapiLibraryOfBuild, BesideAnInstalledBinaryOrInItsBuildTree) {
  const std::filesystem::path root = std::filesystem::path(::testing::TempDir()) / "capi_layouts";
  std::filesystem::remove_all(root);
  Touch(root / "prefix/bin/fusetune");
  Touch(root / "prefix/lib/libfusetune_capi.so");
  Touch(root / "build/service/cli/fusetune");
  Touch(root / "build/kernels/capi/libfusetune_capi.so");
  Touch(root / "lonely/bin/fusetune");
  EXPECT_EQ(*CapiLibraryOfBuild((root / "prefix/bin/fusetune").string()), (root / "prefix/lib/libfusetune_capi.so").string());
  EXPECT_EQ(*CapiLibraryOfBuild((root / "build/service/cli/fusetune").string()),
            (root / "build/kernels/capi/libfusetune_capi.so").string());
  const std::string library = (root / "old/libfusetune_capi.so.1").string();
  EXPECT_EQ(*CapiLibraryOfBuild(library), library) << "a library is its own";
  absl::StatusOr<std::string> none = CapiLibraryOfBuild((root / "lonely/bin/fusetune").string());
  EXPECT_TRUE(absl::IsNotFound(none.status())) << none.status();
  EXPECT_NE(none.status().message().find("lonely/lib/libfusetune_capi.so"), std::string::npos) << none.status();
  std::filesystem::remove_all(root);
}

TEST(ReportedCommit, ReadFromTheVersionLine) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "reported_commit";
  std::filesystem::create_directories(dir);
  auto script = [&](const std::string& name, const std::string& body) {
    const std::filesystem::path p = dir / name;
    std::ofstream(p) << "#!/bin/sh\n" << body << "\n";
    chmod(p.c_str(), 0755);
    return p.string();
  };
  EXPECT_EQ(*ReportedCommit(script("good", "echo '0.1.0 (commit ABCDEF1234567890)'")), "abcdef123456");
  EXPECT_EQ(*ReportedCommit(script("it's here", "echo '0.1.0 (commit ABCDEF1234567890)'")), "abcdef123456")
      << "a path the shell would split or unquote";
  EXPECT_EQ(*ReportedCommit(script("outside_git", "echo '0.1.0 (commit unknown)'")), kUnknownCommit);
  EXPECT_TRUE(absl::IsUnavailable(ReportedCommit(script("silent", "exit 0")).status()));
  EXPECT_TRUE(absl::IsUnavailable(ReportedCommit(script("failing", "echo '(commit abcdef1)'; exit 3")).status()));
  EXPECT_TRUE(absl::IsUnavailable(ReportedCommit(script("abbreviated", "echo '(commit abc1234)'")).status()));
  EXPECT_EQ(*ReportedCommit("/somewhere/libfusetune_capi.so"), kUnknownCommit);
  std::filesystem::remove_all(dir);
}

RunInfo CandidateRun(const std::string& commit) {
  RunInfo run;
  run.commit = commit;
  run.host = "testhost";
  run.device = CpuDevice();
  run.label = TestSuite().RunLabel();
  return run;
}

TEST(RecordRegressRun, StoresTheCandidatesBenchRunAndTheVerdictRows) {
  auto store = MemoryStore();
  absl::StatusOr<RecordedRegressRun> recorded =
      RecordRegressRun(*store, TestSuite(), TimedComparison(kCommitA, kCommitB), CandidateRun(kCommitB), false);
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_GT(recorded->run_id, 0);
  EXPECT_EQ(recorded->rows.size(), 2u);
  absl::StatusOr<RunInfo> run = store->FindBenchRun(kSuiteName, CpuDevice().DeviceClass(), kCommitB);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->run_id, recorded->run_id);
  absl::StatusOr<std::vector<BenchCell>> cells = store->ListBenchCells(run->run_id);
  ASSERT_TRUE(cells.ok());
  ASSERT_EQ(cells->size(), 1u);
  EXPECT_EQ((*cells)[0].blocks.size(), 2u) << "the candidate's blocks";
  EXPECT_EQ(store->ListRegressions(kCommitB)->size(), 2u);
}

TEST(RecordRegressRun, APlantedRunStoresRowsButNoBenchRun) {
  auto store = MemoryStore();
  absl::StatusOr<RecordedRegressRun> recorded =
      RecordRegressRun(*store, TestSuite(), TimedComparison(kCommitA, kCommitB), CandidateRun(kCommitB), true);
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_EQ(recorded->run_id, 0);
  EXPECT_TRUE(absl::IsNotFound(store->FindBenchRun(kSuiteName, "", kCommitB).status()));
  ASSERT_EQ(store->ListRegressions(kCommitB)->size(), 2u);
  EXPECT_EQ((*store->ListRegressions(kCommitB))[1].metric, "planted_latency");
}

}  // namespace
}  // namespace fusetune::regress
