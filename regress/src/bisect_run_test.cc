// The bisect run over fake builds and a fake comparison with a planted culprit, the commit
// range from a temporary git repository, the cell suite from stored bench cells, and the
// culprit's record.
#include "fusetune/regress/bisect_run.h"

#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "testing/store_fixtures.h"

namespace fusetune::regress {
namespace {

constexpr char kBuildPrefix[] = "build:";

// c0 .. c<n-1> after the good endpoint "good"; the last is the bad endpoint.
BisectRange FakeRange(int n) {
  BisectRange range;
  range.good = "good";
  for (int i = 0; i < n; ++i) range.commits.push_back("c" + std::to_string(i));
  range.bad = range.commits.back();
  return range;
}

// The index of a fake build's commit in FakeRange: -1 for the good endpoint.
int IndexOf(const std::string& build) {
  const std::string commit = build.substr(std::string(kBuildPrefix).size());
  return commit == "good" ? -1 : std::stoi(commit.substr(1));
}

Comparison OneCell(Verdict verdict) {
  Comparison c;
  c.candidate.device = testing::CpuDevice();
  CellComparison cell;
  cell.cell.problem = *AttentionProblem::FromKey(testing::kProblemKey);
  cell.cell.config = *KernelConfig::FromKey(testing::kConfigA);
  cell.verdict.verdict = verdict;
  cell.verdict.ratio.pairwise_ratio = verdict == Verdict::kRegressed ? 1.1 : 1.0;
  cell.verdict.p_slower_adjusted = verdict == Verdict::kRegressed ? 0.001 : 0.5;
  c.cells.push_back(cell);
  return c;
}

// Builds every commit but those in `broken` (NotFound: does not build), counting the builds.
BuildCache FakeBuilds(std::map<std::string, int>* built, std::vector<std::string> broken = {}) {
  return BuildCache([built, broken](const std::string& commit) -> absl::StatusOr<std::string> {
    ++(*built)[commit];
    for (const std::string& b : broken) {
      if (b == commit) return absl::NotFoundError(commit + " does not build");
    }
    return kBuildPrefix + commit;
  });
}

// A slowdown planted at commit `culprit`: a candidate at or after it is regressed against a
// baseline before it.
CompareBuildsFn PlantedAt(int culprit) {
  return [culprit](const std::string& baseline, const std::string& candidate) -> absl::StatusOr<Comparison> {
    return OneCell(IndexOf(baseline) < culprit && IndexOf(candidate) >= culprit ? Verdict::kRegressed : Verdict::kSame);
  };
}

TEST(RunBisect, FindsThePlantedCulpritAndConfirmsItAgainstItsParent) {
  std::map<std::string, int> built;
  BuildCache builds = FakeBuilds(&built);
  std::vector<std::pair<std::string, ProbeResult>> probes;
  BisectRunOptions options;
  bool endpoints_told = false;
  options.on_endpoints = [&](const Comparison& c) { endpoints_told = Judge(c, false) == ProbeResult::kBad; };
  options.on_probe = [&](const std::string& commit, ProbeResult result, const Comparison* c) {
    EXPECT_NE(c, nullptr);
    probes.emplace_back(commit, result);
  };
  absl::StatusOr<BisectReport> report = RunBisect(FakeRange(10), options, builds, PlantedAt(6));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(endpoints_told);
  ASSERT_TRUE(report->outcome.found);
  EXPECT_EQ(report->culprit, "c6");
  EXPECT_EQ(report->parent, "c5");
  EXPECT_TRUE(report->confirmed);
  ASSERT_TRUE(report->confirmation.has_value());
  EXPECT_EQ(Telling(*report->confirmation, false).verdict.verdict, Verdict::kRegressed);
  ASSERT_FALSE(probes.empty());
  for (const auto& [commit, result] : probes) {
    EXPECT_EQ(result, std::stoi(commit.substr(1)) >= 6 ? ProbeResult::kBad : ProbeResult::kGood) << commit;
  }
  for (const auto& [commit, times] : built) EXPECT_EQ(times, 1) << commit << " is built once";
  EXPECT_LE(builds.count(), 16);
}

TEST(RunBisect, ACommitThatDoesNotBuildIsSkipped) {
  std::map<std::string, int> built;
  BuildCache builds = FakeBuilds(&built, {"c4"});
  std::vector<std::string> skipped;
  BisectRunOptions options;
  options.on_probe = [&](const std::string& commit, ProbeResult result, const Comparison* c) {
    if (result == ProbeResult::kSkip) {
      EXPECT_EQ(c, nullptr);
      skipped.push_back(commit);
    }
  };
  absl::StatusOr<BisectReport> report = RunBisect(FakeRange(10), options, builds, PlantedAt(6));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(skipped, std::vector<std::string>{"c4"});
  ASSERT_TRUE(report->outcome.found);
  EXPECT_EQ(report->culprit, "c6");
  bool listed = false;
  for (const auto& [commit, build] : builds.all()) {
    if (commit == "c4") listed = absl::IsNotFound(build.status());
  }
  EXPECT_TRUE(listed) << "the builds list says c4 does not build";
}

TEST(RunBisect, AGradualChangeEndsUnconfirmed) {
  std::map<std::string, int> built;
  BuildCache builds = FakeBuilds(&built);
  // Each commit adds a little: only three or more commits apart is the change significant.
  CompareBuildsFn gradual = [](const std::string& baseline, const std::string& candidate) -> absl::StatusOr<Comparison> {
    return OneCell(IndexOf(candidate) - IndexOf(baseline) >= 3 ? Verdict::kRegressed : Verdict::kSame);
  };
  absl::StatusOr<BisectReport> report = RunBisect(FakeRange(10), {}, builds, gradual);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(report->outcome.found);
  EXPECT_EQ(report->culprit, "c2");
  EXPECT_FALSE(report->confirmed) << "against its parent the change is not significant";
}

TEST(RunBisect, TheBadEndpointMustShowTheChange) {
  std::map<std::string, int> built;
  BuildCache builds = FakeBuilds(&built);
  absl::StatusOr<BisectReport> report = RunBisect(FakeRange(5), {}, builds, PlantedAt(100));
  ASSERT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition) << report.status();
  EXPECT_NE(report.status().message().find("is not slower than the good one"), std::string::npos);
  BisectRunOptions faster;
  faster.improvement = true;
  report = RunBisect(FakeRange(5), faster, builds, PlantedAt(2));
  ASSERT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition) << "a slowdown is no improvement";
  EXPECT_NE(report.status().message().find("is not faster"), std::string::npos);
}

TEST(RunBisect, AnEndpointThatDoesNotBuildIsAnError) {
  std::map<std::string, int> built;
  BuildCache builds = FakeBuilds(&built, {"good"});
  absl::StatusOr<BisectReport> report = RunBisect(FakeRange(5), {}, builds, PlantedAt(2));
  ASSERT_TRUE(absl::IsNotFound(report.status())) << report.status();
  EXPECT_EQ(report.status().message().rfind("the good commit must build: ", 0), 0u) << report.status();
}

TEST(RunBisect, TheBuildCapEndsTheSearchWithTheCandidatesLeft) {
  std::map<std::string, int> built;
  BuildCache builds = FakeBuilds(&built);
  BisectRunOptions options;
  options.max_builds = 3;  // the endpoints and one probe
  absl::StatusOr<BisectReport> report = RunBisect(FakeRange(20), options, builds, PlantedAt(13));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->outcome.found);
  EXPECT_TRUE(report->outcome.capped);
  EXPECT_LE(report->outcome.candidates_from, 13);
  EXPECT_GE(report->outcome.candidates_to, 13);
}

TEST(Judge, BadOnTheAskedChangeSkipOnUnknown) {
  Comparison c = OneCell(Verdict::kSame);
  EXPECT_EQ(Judge(c, false), ProbeResult::kGood);
  c.cells.push_back(OneCell(Verdict::kUnknown).cells[0]);
  EXPECT_EQ(Judge(c, false), ProbeResult::kSkip);
  c.cells.push_back(OneCell(Verdict::kImproved).cells[0]);
  EXPECT_EQ(Judge(c, true), ProbeResult::kBad);
  EXPECT_EQ(Telling(c, true).verdict.verdict, Verdict::kImproved);
  EXPECT_EQ(Telling(c, false).verdict.verdict, Verdict::kSame) << "none bad: the first cell";
}

// A temporary git repository with four commits of a tracked file.
class GitRepo : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("bisect_run_test_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::string script = "cd " + ShellQuote(dir_.string()) + " && git init -q . && ";
    for (int i = 0; i < 4; ++i) {
      script += "echo " + std::to_string(i) + " > file && git add file && "
                "git -c user.name=test -c user.email=test@example.com commit -q -m 'commit " + std::to_string(i) + "' && ";
    }
    ASSERT_EQ(RunShell(script + "true").status, 0) << "git is needed";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string repo() const { return dir_.string(); }

  std::filesystem::path dir_;
};

TEST_F(GitRepo, RangeIsFirstParentOldestFirstEndingAtTheBadCommit) {
  absl::StatusOr<BisectRange> range = ResolveRange(repo(), "HEAD~3", "HEAD");
  ASSERT_TRUE(range.ok()) << range.status();
  ASSERT_EQ(range->commits.size(), 3u);
  EXPECT_EQ(range->good, *ResolveCommit(repo(), "HEAD~3"));
  EXPECT_EQ(range->bad, *ResolveCommit(repo(), "HEAD"));
  EXPECT_EQ(range->commits.back(), range->bad);
  EXPECT_EQ(range->commits.front(), *ResolveCommit(repo(), "HEAD~2"));
  EXPECT_EQ(range->bad.size(), 40u) << "full hashes: what builds are asked for";
  EXPECT_EQ(*Git(repo(), {"log", "-1", "--format=%s", range->bad}), "commit 3");
}

TEST_F(GitRepo, RangeErrors) {
  EXPECT_EQ(ResolveRange(repo(), "HEAD", "HEAD~2").status().code(), absl::StatusCode::kInvalidArgument)
      << "good must be an ancestor of bad";
  EXPECT_EQ(ResolveRange(repo(), "HEAD", "HEAD").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::IsNotFound(ResolveRange(repo(), "no-such-ref", "HEAD").status()));
  EXPECT_EQ(ResolveRange("/", "HEAD~1", "HEAD").status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(RunShell("echo changed > " + ShellQuote(repo() + "/file")).status, 0);
  EXPECT_EQ(ResolveRange(repo(), "HEAD~1", "HEAD").status().code(), absl::StatusCode::kFailedPrecondition)
      << "uncommitted changes";
}

TEST(CellSuite, TheProblemComesFromTheStoredBenchCells) {
  auto store = testing::MemoryStore();
  testing::RecordBenchRun(*store, testing::kCommitA,
                          {testing::MeasuredBenchCell(testing::kProblemKey, testing::kConfigA, {1, 2, 3})});
  const std::string cell = std::string(testing::kProblemKey) + " " + testing::kConfigA;
  absl::StatusOr<Suite> suite = CellSuite("", cell, store.get(), "test.db");
  ASSERT_TRUE(suite.ok()) << suite.status();
  ASSERT_EQ(suite->cells.size(), 1u);
  EXPECT_EQ(suite->cells[0].problem.Key(), testing::kProblemKey);
  EXPECT_EQ(suite->cells[0].config.Key(), testing::kConfigA);

  absl::StatusOr<Suite> unknown =
      CellSuite("", std::string(testing::kProblemKey) + " " + testing::kConfigB, store.get(), "test.db");
  ASSERT_TRUE(absl::IsNotFound(unknown.status())) << unknown.status();
  EXPECT_NE(unknown.status().message().find("test.db holds no bench cell"), std::string::npos);
  EXPECT_NE(unknown.status().message().find(cell), std::string::npos) << "lists the cells it holds";

  EXPECT_EQ(CellSuite("", "no-space", nullptr, "").status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<Suite> from_key = CellSuite("", cell, nullptr, "");
  ASSERT_TRUE(from_key.ok()) << from_key.status();
  EXPECT_EQ(from_key->cells[0].problem.Key(), testing::kProblemKey);
}

TEST(RecordCulprit, StoresTheCulpritAgainstItsParent) {
  auto store = testing::MemoryStore();
  const CellComparison cell = OneCell(Verdict::kRegressed).cells[0];
  const std::string culprit = std::string(testing::kCommitB) + "0000000000000000000000000000";
  ASSERT_TRUE(RecordCulprit(*store, cell, culprit, testing::kCommitA, "cpu/x", false).ok());
  absl::StatusOr<std::vector<Regression>> rows = store->ListRegressions();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].commit, testing::kCommitB) << "stored canonical";
  EXPECT_EQ((*rows)[0].baseline_commit, testing::kCommitA);
  EXPECT_EQ((*rows)[0].metric, "bisect_culprit");
  EXPECT_DOUBLE_EQ((*rows)[0].ratio, 1.1);
  EXPECT_DOUBLE_EQ((*rows)[0].p_value, 0.001);
  EXPECT_EQ((*rows)[0].verdict, "regressed");
}

}  // namespace
}  // namespace fusetune::regress
