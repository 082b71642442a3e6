// A cell's history read from stored bench runs, its errors, its change points and their rows.
#include "fusetune/regress/history.h"

#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "testing/store_fixtures.h"

namespace fusetune::regress {
namespace {

using testing::kConfigA;
using testing::kConfigB;
using testing::kProblemKey;
using testing::kSuiteName;
using testing::MeasuredBenchCell;
using testing::RecordBenchRun;

// A commit of 12 hex digits numbered `i`.
std::string CommitNo(int i) {
  char text[13];
  std::snprintf(text, sizeof text, "%012x", 0xabc000 + i);
  return text;
}

HistoryQuery Query(const std::string& config = kConfigA) { return {kSuiteName, kProblemKey, config, ""}; }

TEST(ReadHistory, OnePointPerRunOldestFirstWithTheMedianOfItsBlocks) {
  auto store = testing::MemoryStore();
  const int64_t first = RecordBenchRun(*store, CommitNo(1), {MeasuredBenchCell(kProblemKey, kConfigA, {10, 30, 20})});
  RecordBenchRun(*store, CommitNo(2), {MeasuredBenchCell(kProblemKey, kConfigA, {11, 12, 13})});
  BenchCell failed = MeasuredBenchCell(kProblemKey, kConfigA, {99});
  failed.outcome = TrialOutcome::kVerifyFailed;
  failed.message = "wrong";
  RecordBenchRun(*store, CommitNo(3), {failed});
  absl::StatusOr<CellHistory> h = ReadHistory(*store, Query(""));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->problem_key, kProblemKey);
  EXPECT_EQ(h->config_key, kConfigA) << "the problem's only config";
  EXPECT_EQ(h->device_class, testing::CpuDevice().DeviceClass());
  ASSERT_EQ(h->points.size(), 2u) << "a failed cell is no point";
  EXPECT_EQ(h->points[0].run_id, first);
  EXPECT_EQ(h->points[0].commit, CommitNo(1));
  EXPECT_DOUBLE_EQ(h->points[0].median_us, 20);
  EXPECT_DOUBLE_EQ(h->points[1].median_us, 12);
  EXPECT_LE(h->points[0].finished_unix_ms, h->points[1].finished_unix_ms);
}

TEST(ReadHistory, NoRunsIsNotFound) {
  auto store = testing::MemoryStore();
  absl::StatusOr<CellHistory> h = ReadHistory(*store, {kSuiteName, kProblemKey, "", "cpu/none"});
  ASSERT_TRUE(absl::IsNotFound(h.status())) << h.status();
  EXPECT_EQ(h.status().message(), "no finished bench run of suite 'cpu-test' on device class 'cpu/none'");
}

TEST(ReadHistory, UnknownOrAmbiguousCellsAreInvalidArguments) {
  auto store = testing::MemoryStore();
  RecordBenchRun(*store, CommitNo(1), {MeasuredBenchCell(kProblemKey, kConfigA, {10}),
                                       MeasuredBenchCell(kProblemKey, kConfigB, {10})});
  absl::StatusOr<CellHistory> unknown = ReadHistory(*store, {kSuiteName, "prefill/b9/hq2/hkv2/q32/k32/d32/causal0/fp32", "", ""});
  ASSERT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("its cells (2 in all)"), std::string::npos) << unknown.status();
  absl::StatusOr<CellHistory> several = ReadHistory(*store, Query(""));
  ASSERT_EQ(several.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(several.status().message().find("has several configs"), std::string::npos) << several.status();
  ASSERT_TRUE(ReadHistory(*store, Query(kConfigB)).ok()) << "naming the config resolves it";

  RecordBenchRun(*store, CommitNo(2), {MeasuredBenchCell(kProblemKey, kConfigA, {10})}, testing::CpuDevice("Other CPU"));
  absl::StatusOr<CellHistory> classes = ReadHistory(*store, Query(kConfigA));
  ASSERT_EQ(classes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(classes.status().message().find("several device classes"), std::string::npos) << classes.status();
  HistoryQuery one = Query(kConfigA);
  one.device_class = testing::CpuDevice("Other CPU").DeviceClass();
  absl::StatusOr<CellHistory> chosen = ReadHistory(*store, one);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->points.size(), 1u);
}

TEST(CollectCellSamples, KeepsTheSuitesCellsOnly) {
  auto store = testing::MemoryStore();
  BenchCell other = MeasuredBenchCell(kProblemKey, kConfigA, {50}, "other-suite");
  other.role = "reference";  // a run's cell is one per (problem, config, role)
  const int64_t run = RecordBenchRun(*store, CommitNo(1), {MeasuredBenchCell(kProblemKey, kConfigA, {10, 11}), other});
  std::vector<RunInfo> runs = *store->ListBenchRuns(kSuiteName, "", 10);
  ASSERT_EQ(runs.size(), 1u);
  absl::StatusOr<CellSamples> samples = CollectCellSamples(*store, runs, kSuiteName, kProblemKey, kConfigA);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->runs.size(), 1u);
  EXPECT_EQ(samples->runs[0].run->run_id, run);
  EXPECT_EQ(samples->runs[0].blocks_by_config.at(kConfigA), (std::vector<double>{10, 11}));
  EXPECT_EQ(samples->known_cells.size(), 1u);
}

TEST(History, AStepIsAChangePointAndItsRowIsRecorded) {
  auto store = testing::MemoryStore();
  // 40 nightly runs: 10 us, then 12 us from run 20 on, each with a little noise.
  for (int i = 0; i < 40; ++i) {
    const double base = i < 20 ? 10.0 : 12.0;
    const double wobble = 0.01 * ((i * 7) % 5);
    RecordBenchRun(*store, CommitNo(i), {MeasuredBenchCell(kProblemKey, kConfigA, {base + wobble})});
  }
  absl::StatusOr<CellHistory> h = ReadHistory(*store, Query());
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->points.size(), 40u);
  absl::StatusOr<ChangePointResult> result = DetectHistoryChangePoints(*h);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->change_points.size(), 1u);
  EXPECT_EQ(result->change_points[0].index, 20);
  EXPECT_EQ(result->change_points[0].commit, CommitNo(20));

  const std::vector<ChangePointRow> rows = ToRows(*h, kSuiteName, *result);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].position, 20);
  EXPECT_EQ(rows[0].direction, "slower");
  EXPECT_NEAR(rows[0].ratio, 1.2, 0.01);
  EXPECT_EQ(rows[0].device_class, h->device_class);

  ASSERT_TRUE(RecordChangePoints(*store, *h, kSuiteName, *result).ok());
  absl::StatusOr<std::vector<ChangePointRow>> stored = store->ListChangePoints({});
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].commit, CommitNo(20));
}

}  // namespace
}  // namespace fusetune::regress
