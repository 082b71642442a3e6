// Planted-slowdown specs checked against a suite, a suite measured in this process, and a suite
// written from stored best configs.
#include "fusetune/regress/suite_bench.h"

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fusetune/kernels/cpu_backend.h"
#include "testing/store_fixtures.h"

namespace fusetune::regress {
namespace {

using testing::kConfigA;
using testing::kProblemKey;

Suite TinySuite() {
  Suite suite;
  suite.name = testing::kSuiteName;
  suite.block.warmup = 0;
  suite.block.repeats = 2;
  suite.block.flush_l2 = false;
  SuiteCell cell;
  cell.problem = *AttentionProblem::FromKey(kProblemKey);
  cell.config = *KernelConfig::FromKey(kConfigA);
  suite.cells.push_back(cell);
  return suite;
}

TEST(CheckPlantedSlowdowns, EverySpecMustParseAndNameACell) {
  EXPECT_TRUE(CheckPlantedSlowdowns(TinySuite(), {}).ok());
  EXPECT_TRUE(CheckPlantedSlowdowns(TinySuite(), {"bm16=0.05", "q32/k32=3%"}).ok());
  absl::Status bad = CheckPlantedSlowdowns(TinySuite(), {"bm16"});
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message().rfind("--plant-slowdown bm16: ", 0), 0u) << bad;
  absl::Status nothing = CheckPlantedSlowdowns(TinySuite(), {"bm128=0.05"});
  EXPECT_EQ(nothing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(nothing.message().find("is in no cell of suite cpu-test"), std::string::npos) << nothing;
  EXPECT_NE(nothing.message().find(std::string(kProblemKey) + " " + kConfigA), std::string::npos)
      << "the cells are listed: " << nothing;
}

TEST(PlantedDescription, TheSpecsJoined) {
  EXPECT_EQ(PlantedDescription({}), "");
  EXPECT_EQ(PlantedDescription({"a=0.1", "b=2%"}), "a=0.1; b=2%");
  absl::StatusOr<std::vector<PlantedSlowdown>> parsed = ParsePlantedSlowdowns({"a=0.1", "b=2%"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_DOUBLE_EQ((*parsed)[1].fraction, 0.02);
  EXPECT_FALSE(ParsePlantedSlowdowns({"a=0.1", "b=x"}).ok());
}

TEST(BenchSuite, MeasuresEveryCellOnTheBackend) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  absl::StatusOr<SuiteBench> bench = BenchSuite(*cpu, testing::kCommitA, TinySuite(), {.blocks = 3});
  ASSERT_TRUE(bench.ok()) << bench.status();
  EXPECT_EQ(bench->source.commit, testing::kCommitA);
  EXPECT_EQ(bench->source.device.backend, "cpu");
  ASSERT_EQ(bench->cells.size(), 1u);
  EXPECT_EQ(bench->cells[0].measurement.check.outcome, TrialOutcome::kOk);
  EXPECT_EQ(bench->cells[0].measurement.blocks.size(), 3u);
  EXPECT_FALSE(bench->AnyCellFailed());
  bench->cells[0].measurement.check.outcome = TrialOutcome::kVerifyFailed;
  EXPECT_TRUE(bench->AnyCellFailed());
}

void RecordBest(Store& store, const std::string& device_class, const std::string& problem_key) {
  BestConfig best;
  best.device_class = device_class;
  best.problem_key = problem_key;
  best.config_key = kConfigA;
  best.median_us = 10;
  best.commit = testing::kCommitA;
  ASSERT_TRUE(store.UpsertBestConfig(best).ok());
}

TEST(SuiteFromDatabase, ASuiteOfTheOnlyDeviceClasssBestConfigs) {
  auto store = testing::MemoryStore();
  absl::StatusOr<SuiteFromStore> none = SuiteFromDatabase(*store, "", "nightly", "test.db");
  ASSERT_TRUE(absl::IsNotFound(none.status())) << none.status();
  EXPECT_EQ(none.status().message(), "test.db holds no best configs: tune first ('fusetune sweep')");

  RecordBest(*store, "cpu/Test-CPU/x86_64", kProblemKey);
  RecordBest(*store, "cpu/Test-CPU/x86_64", "varlen/b2/hash0123");
  absl::StatusOr<SuiteFromStore> written = SuiteFromDatabase(*store, "", "nightly", "test.db");
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->device_class, "cpu/Test-CPU/x86_64");
  EXPECT_EQ(written->best_configs, 2u);
  EXPECT_EQ(written->suite.name, "nightly");
  EXPECT_EQ(written->suite.device_class, "cpu/Test-CPU/x86_64");
  ASSERT_FALSE(written->suite.cells.empty());
  EXPECT_EQ(written->suite.cells[0].role, "best");
  EXPECT_EQ(written->suite.cells[0].config.Key(), kConfigA);
  ASSERT_EQ(written->skipped.size(), 1u) << "a problem its key cannot rebuild";

  RecordBest(*store, "cpu/Other-CPU/x86_64", kProblemKey);
  absl::StatusOr<SuiteFromStore> several = SuiteFromDatabase(*store, "", "nightly", "test.db");
  ASSERT_EQ(several.status().code(), absl::StatusCode::kInvalidArgument) << several.status();
  EXPECT_NE(several.status().message().find("choose one with --device-class"), std::string::npos);
  EXPECT_TRUE(SuiteFromDatabase(*store, "cpu/Other-CPU/x86_64", "nightly", "test.db").ok());
}

}  // namespace
}  // namespace fusetune::regress
