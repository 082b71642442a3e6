// A suite's measured cells as stored bench cells and back, and a bench run stored whole.
#include "fusetune/regress/bench_records.h"

#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "testing/store_fixtures.h"

namespace fusetune::regress {
namespace {

Suite OneCellSuite() {
  Suite suite;
  suite.name = testing::kSuiteName;
  SuiteCell cell;
  cell.problem = *AttentionProblem::FromKey(testing::kProblemKey);
  cell.config = *KernelConfig::FromKey(testing::kConfigA);
  cell.role = "reference";
  suite.cells.push_back(cell);
  return suite;
}

CellMeasurement Measured(std::vector<double> medians) {
  CellMeasurement m;
  m.check.outcome = TrialOutcome::kOk;
  m.check.max_rel_error = 2e-6;
  m.check.tolerance = 1e-4;
  for (double v : medians) m.blocks.push_back({50, v, {}, {}, false});
  return m;
}

TEST(ToBenchCell, KeepsTheCellAndMakesErrorsFinite) {
  const Suite suite = OneCellSuite();
  CellMeasurement m = Measured({10, 12, 11});
  m.check.max_abs_error = std::numeric_limits<double>::quiet_NaN();
  const BenchCell row = ToBenchCell(suite, 7, suite.cells[0], m);
  EXPECT_EQ(row.run_id, 7);
  EXPECT_EQ(row.suite, testing::kSuiteName);
  EXPECT_EQ(row.problem_key, testing::kProblemKey);
  EXPECT_EQ(row.config_key, testing::kConfigA);
  EXPECT_EQ(row.role, "reference");
  EXPECT_EQ(row.max_abs_error, 0) << "a non-finite error is stored as 0";
  EXPECT_DOUBLE_EQ(row.max_rel_error, 2e-6);
  EXPECT_EQ(row.blocks.size(), 3u);
  EXPECT_EQ(ProblemFromJson(row.problem_json)->Key(), testing::kProblemKey);

  const StoredCell stored = ToStoredCell(row);
  EXPECT_EQ(stored.problem_key, testing::kProblemKey);
  EXPECT_EQ(stored.role, "reference");
  EXPECT_EQ(stored.measurement.Medians(), (std::vector<double>{10, 12, 11}));
  EXPECT_DOUBLE_EQ(stored.measurement.check.tolerance, 1e-4);
}

TEST(StoreBenchRun, StoresAFinishedRunTheBaselineLookupFinds) {
  auto store = testing::MemoryStore();
  const Suite suite = OneCellSuite();
  RunInfo run;
  run.commit = testing::kCommitA;
  run.host = "testhost";
  run.device = testing::CpuDevice();
  run.label = suite.RunLabel();
  absl::StatusOr<int64_t> id = StoreBenchRun(*store, suite, run, {{suite.cells[0], Measured({10, 12, 11})}});
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<RunInfo> found = store->FindBenchRun(suite.name, run.device.DeviceClass(), testing::kCommitA);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->run_id, *id);
  EXPECT_GT(found->finished_unix_ms, 0);
  EXPECT_EQ(store->ListBenchCells(*id)->size(), 1u);
}

TEST(MedianOfBlocks, TheMedianOfTheBlockMediansOrZero) {
  EXPECT_DOUBLE_EQ(MedianOfBlocks(Measured({10, 30, 20})), 20);
  EXPECT_EQ(MedianOfBlocks(Measured({})), 0);
}

}  // namespace
}  // namespace fusetune::regress
