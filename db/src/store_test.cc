// Schema, runs, trials, best configs, regressions, workers and input validation.
#include "fusetune/db/store.h"

#include <cmath>
#include <fstream>
#include <limits>

#include "gtest/gtest.h"
#include "schema.h"
#include "test_util.h"
#include "testing/store_backends.h"

namespace fusetune {
namespace {

using db_test::OpenOrDie;
using db_test::RawQuery;
using db_test::ScopedTempDir;
using db_test::TestRun;
using db_test::TestTrial;

// Every TEST_P below runs on SQLite and on PostgreSQL (testing/store_backends.h).
class StoreBadInput : public db_test::StoreBackendTest {};
FUSETUNE_STORE_BACKENDS(StoreBadInput);
class StoreBestConfigs : public db_test::StoreBackendTest {};
FUSETUNE_STORE_BACKENDS(StoreBestConfigs);
class StoreRecordSink : public db_test::StoreBackendTest {};
FUSETUNE_STORE_BACKENDS(StoreRecordSink);
class StoreRegressions : public db_test::StoreBackendTest {};
FUSETUNE_STORE_BACKENDS(StoreRegressions);
class StoreRuns : public db_test::StoreBackendTest {};
FUSETUNE_STORE_BACKENDS(StoreRuns);
class StoreSchema : public db_test::StoreBackendTest {};
FUSETUNE_STORE_BACKENDS(StoreSchema);
class StoreTrials : public db_test::StoreBackendTest {};
FUSETUNE_STORE_BACKENDS(StoreTrials);
class StoreWorkers : public db_test::StoreBackendTest {};
FUSETUNE_STORE_BACKENDS(StoreWorkers);

constexpr char kProblemA[] = "prefill/b1/hq12/hkv12/q128/k128/d64/causal0/fp32";
constexpr char kProblemB[] = "prefill/b1/hq12/hkv12/q256/k256/d64/causal0/fp32";
constexpr char kConfig1[] = "fused/bm64/bs32/w2/fp32/st1";
constexpr char kConfig2[] = "materialized/bm64/bs64/w2/fp32/st1";

// ---- schema

TEST(StoreSchemaSqlite, MigratesEmptyFileAndKeepsVersionOnReopen) {
  ScopedTempDir dir;
  const std::string path = dir.File("f.db");
  {
    auto store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    ASSERT_GE(Store::LatestSchemaVersion(), 1);
    EXPECT_EQ(*store->SchemaVersion(), Store::LatestSchemaVersion());
    ASSERT_TRUE(store->BeginRun(TestRun()).ok());
  }
  EXPECT_EQ(RawQuery(path, "PRAGMA user_version"), std::to_string(Store::LatestSchemaVersion()));
  EXPECT_EQ(RawQuery(path,
                     "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                     "('runs','trials','best_configs','regressions','workers','jobs')"),
            "6");
  auto reopened = OpenOrDie(path);
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(*reopened->SchemaVersion(), Store::LatestSchemaVersion());
  // Reopening migrated nothing twice and kept the data.
  EXPECT_TRUE(reopened->GetRun(1).ok());
}

TEST(StoreSchemaSqlite, RefusesDatabaseWrittenByNewerBinary) {
  ScopedTempDir dir;
  const std::string path = dir.File("future.db");
  { ASSERT_NE(OpenOrDie(path), nullptr); }
  const int future = Store::LatestSchemaVersion() + 1;
  RawQuery(path, "PRAGMA user_version = " + std::to_string(future));
  ASSERT_EQ(RawQuery(path, "PRAGMA user_version"), std::to_string(future));

  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  // Refusing changed nothing.
  EXPECT_EQ(RawQuery(path, "PRAGMA user_version"), std::to_string(future));
}

TEST(StoreSchemaSqlite, RefusesNewerSchemaEvenOnAnOtherwiseEmptyFile) {
  ScopedTempDir dir;
  const std::string path = dir.File("empty-future.db");
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version = 999", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(path);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  EXPECT_EQ(RawQuery(path, "SELECT COUNT(*) FROM sqlite_master"), "0");
}

TEST(StoreSchemaSqlite, UsesWriteAheadLog) {
  ScopedTempDir dir;
  const std::string path = dir.File("wal.db");
  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  // journal_mode=WAL is persistent in the file: a separate connection sees it.
  EXPECT_EQ(RawQuery(path, "PRAGMA journal_mode"), "wal");
}

TEST(StoreSchemaSqlite, NonDatabaseFileIsAnErrorNotACrash) {
  ScopedTempDir dir;
  const std::string path = dir.File("garbage.db");
  {
    std::ofstream f(path, std::ios::binary);
    for (int i = 0; i < 4096; ++i) f << static_cast<char>('x' + i % 3);
  }
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << s.status();
}

TEST_P(StoreSchema, UnopenablePathIsAnError) {
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open("/nonexistent-dir/sub/x.db");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(Store::Open("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(StoreSchema, InMemoryDatabaseWorks) {
  auto store = OpenOrDie(Location());
  ASSERT_NE(store, nullptr);
  absl::StatusOr<int64_t> run = store->BeginRun(TestRun());
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(store->RecordTrial(TestTrial(*run, kProblemA, kConfig1)).ok());
}

// ---- runs

TEST_P(StoreRuns, RoundTripsEveryField) {
  auto store = OpenOrDie(Location());
  RunInfo in = TestRun("deadbeef", "nightly");
  in.device.name = "NVIDIA H200";
  in.device.backend = "cuda";
  in.device.arch = "sm90";
  in.device.shared_mem_per_block = 232448;
  absl::StatusOr<int64_t> id = store->BeginRun(in);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_GT(*id, 0);

  absl::StatusOr<RunInfo> out = store->GetRun(*id);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->run_id, *id);
  EXPECT_EQ(out->commit, "deadbeef");
  EXPECT_EQ(out->host, in.host);
  EXPECT_EQ(out->device.DeviceClass(), "cuda/NVIDIA-H200/sm90");
  EXPECT_EQ(out->device.name, in.device.name);
  EXPECT_EQ(out->device.sm_count, in.device.sm_count);
  EXPECT_EQ(out->device.shared_mem_per_block, 232448);
  EXPECT_EQ(out->device.l2_bytes, in.device.l2_bytes);
  EXPECT_EQ(out->device.memory_bytes, in.device.memory_bytes);
  EXPECT_EQ(out->device.driver, in.device.driver);
  EXPECT_EQ(out->device.max_clock_mhz, in.device.max_clock_mhz);
  EXPECT_EQ(out->tool_version, in.tool_version);
  EXPECT_EQ(out->environment, in.environment);
  EXPECT_EQ(out->label, "nightly");
  EXPECT_EQ(out->started_unix_ms, in.started_unix_ms);
  EXPECT_EQ(out->finished_unix_ms, 0);

  ASSERT_TRUE(store->FinishRun(*id).ok());
  const int64_t finished = store->GetRun(*id)->finished_unix_ms;
  EXPECT_GT(finished, 0);
  ASSERT_TRUE(store->FinishRun(*id).ok());  // finishing twice keeps the first time
  EXPECT_EQ(store->GetRun(*id)->finished_unix_ms, finished);
}

TEST_P(StoreRuns, UnknownRunIsNotFound) {
  auto store = OpenOrDie(Location());
  EXPECT_EQ(store->GetRun(42).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->FinishRun(42).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->CountTrials(42).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->ListTrials(42).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(StoreRuns, FindUnfinishedRunReturnsNewestMatchingUnfinishedRun) {
  auto store = OpenOrDie(Location());
  const std::string dc = db_test::TestDevice().DeviceClass();
  const int64_t older = *store->BeginRun(TestRun("c1", "sweep"));
  const int64_t newer = *store->BeginRun(TestRun("c1", "sweep"));
  const int64_t other_label = *store->BeginRun(TestRun("c1", "nightly"));
  (void)other_label;
  ASSERT_GT(newer, older);

  absl::StatusOr<RunInfo> found = store->FindUnfinishedRun("c1", dc, "sweep");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->run_id, newer);

  ASSERT_TRUE(store->FinishRun(newer).ok());
  EXPECT_EQ(store->FindUnfinishedRun("c1", dc, "sweep")->run_id, older);
  ASSERT_TRUE(store->FinishRun(older).ok());
  EXPECT_EQ(store->FindUnfinishedRun("c1", dc, "sweep").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->FindUnfinishedRun("c2", dc, "nightly").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->FindUnfinishedRun("c1", "cpu/other/isa", "nightly").status().code(),
            absl::StatusCode::kNotFound);
}

// ---- trials

void ExpectSameTrial(const Trial& a, const Trial& b) {
  EXPECT_EQ(a.trial_id, b.trial_id);
  EXPECT_EQ(a.run_id, b.run_id);
  EXPECT_EQ(a.problem_key, b.problem_key);
  EXPECT_EQ(a.config_key, b.config_key);
  EXPECT_EQ(a.attempt, b.attempt);
  EXPECT_EQ(a.outcome, b.outcome);
  EXPECT_EQ(a.message, b.message);
  ASSERT_EQ(a.samples_us.size(), b.samples_us.size());
  for (size_t i = 0; i < a.samples_us.size(); ++i) {
    if (std::isnan(a.samples_us[i])) {
      EXPECT_TRUE(std::isnan(b.samples_us[i]));
    } else {
      EXPECT_EQ(a.samples_us[i], b.samples_us[i]);  // exact: JSON round-trips doubles
    }
  }
  EXPECT_EQ(a.median_us, b.median_us);
  EXPECT_EQ(a.p10_us, b.p10_us);
  EXPECT_EQ(a.p90_us, b.p90_us);
  if (std::isnan(a.max_abs_error)) {
    EXPECT_TRUE(std::isnan(b.max_abs_error));
  } else {
    EXPECT_EQ(a.max_abs_error, b.max_abs_error);
  }
  EXPECT_EQ(a.max_rel_error, b.max_rel_error);
  EXPECT_EQ(a.unquantised_rel_error, b.unquantised_rel_error);
  EXPECT_EQ(a.checked_elements, b.checked_elements);
  EXPECT_EQ(a.sm_clock_mhz, b.sm_clock_mhz);
  EXPECT_EQ(a.flops, b.flops);
  EXPECT_EQ(a.created_unix_ms, b.created_unix_ms);
  EXPECT_EQ(a.stage, b.stage);
  EXPECT_EQ(a.blocks.size(), b.blocks.size());
  EXPECT_EQ(a.wall_seconds, b.wall_seconds);
}

TEST_P(StoreTrials, RoundTripsEveryFieldIncludingFailuresAndNaN) {
  auto store = OpenOrDie(Location());
  const int64_t run = *store->BeginRun(TestRun());
  Trial ok = TestTrial(run, kProblemA, kConfig1);
  ok.samples_us = {0.1, 1.0 / 3.0, 12345.678901234567};
  Trial bad = TestTrial(run, kProblemA, kConfig2);
  bad.outcome = TrialOutcome::kVerifyFailed;
  bad.message = "max rel error nan > 1e-4 at element 17";
  bad.samples_us = {};
  bad.max_abs_error = std::numeric_limits<double>::quiet_NaN();
  bad.max_rel_error = std::numeric_limits<double>::infinity();
  Trial unsupported = TestTrial(run, kProblemB, kConfig1, 2);
  unsupported.outcome = TrialOutcome::kUnsupported;
  unsupported.message = "head_dim 300 out of range";
  ASSERT_TRUE(store->RecordTrials({ok, bad, unsupported}).ok());

  absl::StatusOr<std::vector<Trial>> all = store->ListTrials(run);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  ExpectSameTrial(ok, (*all)[0]);
  ExpectSameTrial(bad, (*all)[1]);
  ExpectSameTrial(unsupported, (*all)[2]);

  absl::StatusOr<std::vector<Trial>> only_b = store->ListTrials(run, kProblemB);
  ASSERT_TRUE(only_b.ok());
  ASSERT_EQ(only_b->size(), 1u);
  EXPECT_EQ((*only_b)[0].trial_id, unsupported.trial_id);
  EXPECT_TRUE(*store->HasTrial(ok.trial_id));
  EXPECT_FALSE(*store->HasTrial("no-such-trial"));
}

TEST_P(StoreTrials, KeepsTheErrorAgainstTheUnquantisedReferenceAndRefusesANegativeOne) {
  auto store = OpenOrDie(Location());
  const int64_t run = *store->BeginRun(TestRun());
  const std::string e4m3 = "decode/b16/hq32/hkv8/q1/k8192/d128/causal0/bf16/kve4m3";
  Trial quantised = TestTrial(run, e4m3, kConfig1);
  quantised.max_rel_error = 1.25e-3;
  quantised.unquantised_rel_error = 0.0234375;
  Trial failed = TestTrial(run, e4m3, kConfig2);
  failed.outcome = TrialOutcome::kVerifyFailed;
  failed.message = "all-zero output";
  failed.unquantised_rel_error = std::numeric_limits<double>::infinity();
  const Trial plain = TestTrial(run, kProblemA, kConfig1);
  ASSERT_TRUE(store->RecordTrials({quantised, failed, plain}).ok());
  absl::StatusOr<std::vector<Trial>> all = store->ListTrials(run);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  ExpectSameTrial(quantised, (*all)[0]);
  ExpectSameTrial(failed, (*all)[1]);
  EXPECT_EQ((*all)[2].unquantised_rel_error, 0.0);
  Trial negative = TestTrial(run, e4m3, kConfig1, 3);
  negative.unquantised_rel_error = -1e-3;
  absl::Status refused = store->RecordTrial(negative);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("unquantised_rel_error"), std::string::npos) << refused;
  negative.unquantised_rel_error = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(store->RecordTrial(negative).code(), absl::StatusCode::kInvalidArgument);
}

TEST(StoreTrialsSqlite, SameTrialIdTwiceStoresOneRow) {
  ScopedTempDir dir;
  auto store = OpenOrDie(dir.File("idem.db"));
  const int64_t run = *store->BeginRun(TestRun());
  Trial t = TestTrial(run, kProblemA, kConfig1);
  ASSERT_TRUE(store->RecordTrial(t).ok());
  Trial retry = t;
  retry.median_us = 999;  // a retried upload must not overwrite the first write
  ASSERT_TRUE(store->RecordTrial(retry).ok());
  EXPECT_EQ(*store->CountTrials(run), 1);
  EXPECT_EQ(store->ListTrials(run)->at(0).median_us, t.median_us);
  EXPECT_EQ(RawQuery(dir.File("idem.db"), "SELECT COUNT(*) FROM trials"), "1");

  Trial other = TestTrial(run, kProblemA, kConfig2);
  absl::StatusOr<int> inserted = store->RecordTrialsCountingNew({t, other, other});
  ASSERT_TRUE(inserted.ok()) << inserted.status();
  EXPECT_EQ(*inserted, 1);
  EXPECT_EQ(*store->CountTrials(run), 2);
  EXPECT_EQ(*store->RecordTrialsCountingNew({t, other}), 0);
  EXPECT_EQ(*store->RecordTrialsCountingNew({}), 0);
}

TEST_P(StoreTrials, UnknownRunIsNotFoundAndTheWholeBatchIsRejected) {
  auto store = OpenOrDie(Location());
  const int64_t run = *store->BeginRun(TestRun());
  EXPECT_EQ(store->RecordTrial(TestTrial(run + 100, kProblemA, kConfig1)).code(),
            absl::StatusCode::kNotFound);
  // One transaction: the good trial in a batch with a bad one is not written either.
  absl::Status st = store->RecordTrials(
      {TestTrial(run, kProblemA, kConfig1), TestTrial(run + 100, kProblemA, kConfig2)});
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*store->CountTrials(run), 0);
}

TEST_P(StoreTrials, ListTrialsForProblemFiltersByDeviceClassNewestFirst) {
  auto store = OpenOrDie(Location());
  RunInfo gpu = TestRun();
  gpu.device.backend = "cuda";
  gpu.device.name = "NVIDIA H200";
  gpu.device.arch = "sm90";
  const int64_t cpu_run = *store->BeginRun(TestRun());
  const int64_t gpu_run = *store->BeginRun(gpu);
  Trial older = TestTrial(cpu_run, kProblemA, kConfig1);
  older.created_unix_ms = 1000;
  Trial newer = TestTrial(cpu_run, kProblemA, kConfig2);
  newer.created_unix_ms = 2000;
  Trial other_problem = TestTrial(cpu_run, kProblemB, kConfig1);
  Trial on_gpu = TestTrial(gpu_run, kProblemA, kConfig1);
  ASSERT_TRUE(store->RecordTrials({older, newer, other_problem, on_gpu}).ok());

  const std::string cpu_class = db_test::TestDevice().DeviceClass();
  absl::StatusOr<std::vector<Trial>> got = store->ListTrialsForProblem(cpu_class, kProblemA, 10);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].trial_id, newer.trial_id);
  EXPECT_EQ((*got)[1].trial_id, older.trial_id);
  EXPECT_EQ(store->ListTrialsForProblem(cpu_class, kProblemA, 1)->size(), 1u);
  absl::StatusOr<std::vector<Trial>> gpu_got =
      store->ListTrialsForProblem("cuda/NVIDIA-H200/sm90", kProblemA, 10);
  ASSERT_EQ(gpu_got->size(), 1u);
  EXPECT_EQ((*gpu_got)[0].trial_id, on_gpu.trial_id);
}

// ---- best configs

BestConfig TestBest(int64_t run, const std::string& problem, const std::string& config,
                    double median) {
  BestConfig b;
  b.device_class = db_test::TestDevice().DeviceClass();
  b.problem_key = problem;
  b.config_key = config;
  b.median_us = median;
  b.p10_us = median * 0.9;
  b.p90_us = median * 1.1;
  b.max_abs_error = 1e-7;
  b.max_rel_error = 3e-7;
  b.speedup_vs_materialized = 2.5;
  b.speedup_vs_partial = 1.25;
  b.best_materialized_us = median * 2.5;
  b.best_partial_us = median * 1.25;
  b.run_id = run;
  b.commit = "abc123";
  b.updated_unix_ms = 1700000001000;
  return b;
}

TEST_P(StoreBestConfigs, UpsertReplacesAndRoundTrips) {
  auto store = OpenOrDie(Location());
  const int64_t run1 = *store->BeginRun(TestRun("c1"));
  const int64_t run2 = *store->BeginRun(TestRun("c2"));
  BestConfig first = TestBest(run1, kProblemA, kConfig1, 100);
  ASSERT_TRUE(store->UpsertBestConfig(first).ok());
  absl::StatusOr<BestConfig> got = store->GetBestConfig(first.device_class, kProblemA);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->config_key, kConfig1);
  EXPECT_EQ(got->median_us, 100);
  EXPECT_EQ(got->p10_us, first.p10_us);
  EXPECT_EQ(got->p90_us, first.p90_us);
  EXPECT_EQ(got->max_abs_error, first.max_abs_error);
  EXPECT_EQ(got->max_rel_error, first.max_rel_error);
  EXPECT_EQ(got->speedup_vs_materialized, 2.5);
  EXPECT_EQ(got->speedup_vs_partial, 1.25);
  EXPECT_EQ(got->best_materialized_us, first.best_materialized_us);
  EXPECT_EQ(got->best_partial_us, first.best_partial_us);
  EXPECT_EQ(got->run_id, run1);
  EXPECT_EQ(got->commit, "abc123");
  EXPECT_EQ(got->updated_unix_ms, first.updated_unix_ms);

  BestConfig second = TestBest(run2, kProblemA, kConfig2, 80);
  second.commit = "c2";
  ASSERT_TRUE(store->UpsertBestConfig(second).ok());
  got = store->GetBestConfig(first.device_class, kProblemA);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->config_key, kConfig2);
  EXPECT_EQ(got->median_us, 80);
  EXPECT_EQ(got->run_id, run2);
  EXPECT_EQ(got->commit, "c2");
  EXPECT_EQ(store->ListBestConfigs()->size(), 1u);  // replaced, not added
}

TEST_P(StoreBestConfigs, ListIsOrderedByProblemAndFiltersByDeviceClass) {
  auto store = OpenOrDie(Location());
  const int64_t run = *store->BeginRun(TestRun());
  ASSERT_TRUE(store->UpsertBestConfig(TestBest(run, kProblemB, kConfig1, 5)).ok());
  ASSERT_TRUE(store->UpsertBestConfig(TestBest(run, kProblemA, kConfig1, 6)).ok());
  BestConfig gpu = TestBest(0, kProblemA, kConfig1, 1);  // run 0 = no provenance run
  gpu.device_class = "cuda/NVIDIA-H200/sm90";
  ASSERT_TRUE(store->UpsertBestConfig(gpu).ok());

  absl::StatusOr<std::vector<BestConfig>> all = store->ListBestConfigs();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].problem_key, kProblemA);
  EXPECT_EQ((*all)[2].problem_key, kProblemB);
  absl::StatusOr<std::vector<BestConfig>> cpu =
      store->ListBestConfigs(db_test::TestDevice().DeviceClass());
  ASSERT_EQ(cpu->size(), 2u);
  EXPECT_EQ((*cpu)[0].problem_key, kProblemA);
  EXPECT_EQ((*cpu)[1].problem_key, kProblemB);
  EXPECT_EQ(store->GetBestConfig(gpu.device_class, kProblemA)->run_id, 0);
  EXPECT_EQ(store->GetBestConfig(gpu.device_class, kProblemB).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(StoreBestConfigs, UnknownProvenanceRunIsNotFound) {
  auto store = OpenOrDie(Location());
  EXPECT_EQ(store->UpsertBestConfig(TestBest(7, kProblemA, kConfig1, 5)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(store->ListBestConfigs()->empty());
}

// ---- the store as a sweep's RecordSink

TEST_P(StoreRecordSink, ASweepsRecordsGoInAndARunsRecordedTrialsComeBack) {
  auto store = OpenOrDie(Location());
  const int64_t run = *store->BeginRun(TestRun());
  const int64_t other = *store->BeginRun(TestRun());
  RecordSink& sink = *store;
  absl::StatusOr<std::vector<Trial>> fresh = sink.RecordedTrials(run);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_TRUE(fresh->empty()) << "a fresh run holds nothing";
  ASSERT_TRUE(sink.RecordTrial(TestTrial(run, kProblemA, kConfig1)).ok());
  ASSERT_TRUE(sink.RecordTrial(TestTrial(run, kProblemB, kConfig2)).ok());
  ASSERT_TRUE(sink.RecordTrial(TestTrial(other, kProblemA, kConfig2)).ok());
  absl::StatusOr<std::vector<Trial>> recorded = sink.RecordedTrials(run);
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  ASSERT_EQ(recorded->size(), 2u) << "the run's own trials only";
  EXPECT_EQ((*recorded)[0].trial_id, TestTrial(run, kProblemA, kConfig1).trial_id);
  EXPECT_EQ((*recorded)[1].trial_id, TestTrial(run, kProblemB, kConfig2).trial_id);
  EXPECT_EQ(sink.RecordedTrials(run + 100).status().code(), absl::StatusCode::kNotFound);

  const BestConfig best = TestBest(run, kProblemA, kConfig1, 42);
  ASSERT_TRUE(sink.RecordBestConfig(best).ok());
  ASSERT_TRUE(sink.RecordBestConfig(best).ok()) << "idempotent";
  absl::StatusOr<BestConfig> got = store->GetBestConfig(best.device_class, kProblemA);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->config_key, kConfig1);
  EXPECT_EQ(got->median_us, 42);
  EXPECT_EQ(got->updated_unix_ms, best.updated_unix_ms);
  EXPECT_EQ(store->ListBestConfigs()->size(), 1u);
  BestConfig empty_key = best;
  empty_key.config_key.clear();
  EXPECT_EQ(sink.RecordBestConfig(empty_key).code(), absl::StatusCode::kInvalidArgument);
}

// ---- regressions

Regression TestRegression(const std::string& commit) {
  Regression r;
  r.commit = commit;
  r.baseline_commit = "base";
  r.device_class = "cuda/NVIDIA-H200/sm90";
  r.problem_key = kProblemA;
  r.config_key = kConfig1;
  r.metric = "latency";
  r.ratio = 1.01;
  r.p_value = 0.4;
  r.verdict = "same";
  return r;
}

TEST_P(StoreRegressions, RoundTripNewestFirstAndFilterByCommit) {
  auto store = OpenOrDie(Location());
  Regression r = TestRegression("new1");
  r.ratio = 1.12;
  r.p_value = 0.003;
  r.verdict = "regressed";
  r.created_unix_ms = 1700000000000;
  absl::StatusOr<int64_t> id1 = store->RecordRegression(r);
  ASSERT_TRUE(id1.ok()) << id1.status();
  Regression r2 = r;
  r2.commit = "new2";
  r2.verdict = "same";
  r2.metric = "max_rel_error";
  const int64_t id2 = *store->RecordRegression(r2);
  EXPECT_GT(id2, *id1);

  absl::StatusOr<std::vector<Regression>> all = store->ListRegressions();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, id2);
  const Regression& got = (*all)[1];
  EXPECT_EQ(got.id, *id1);
  EXPECT_EQ(got.commit, "new1");
  EXPECT_EQ(got.baseline_commit, "base");
  EXPECT_EQ(got.device_class, r.device_class);
  EXPECT_EQ(got.problem_key, r.problem_key);
  EXPECT_EQ(got.config_key, r.config_key);
  EXPECT_EQ(got.metric, "latency");
  EXPECT_EQ(got.ratio, 1.12);
  EXPECT_EQ(got.p_value, 0.003);
  EXPECT_EQ(got.verdict, "regressed");
  EXPECT_EQ(got.created_unix_ms, r.created_unix_ms);

  absl::StatusOr<std::vector<Regression>> only = store->ListRegressions("new2");
  ASSERT_EQ(only->size(), 1u);
  EXPECT_EQ((*only)[0].verdict, "same");
  EXPECT_EQ(store->ListRegressions("", 1)->size(), 1u);

  Regression bad = r;
  bad.verdict = "maybe";
  EXPECT_EQ(store->RecordRegression(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(StoreRegressions, RecordRegressionsWritesAllRowsInOneTransaction) {
  auto store = OpenOrDie(Location());
  absl::StatusOr<int> n = store->RecordRegressions({TestRegression("c1"), TestRegression("c2")});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 2);
  absl::StatusOr<std::vector<Regression>> all = store->ListRegressions();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].commit, "c2");
  EXPECT_GT((*all)[0].created_unix_ms, 0) << "a row without a time is stamped now";
  EXPECT_EQ(*store->RecordRegressions({}), 0);
}

TEST_P(StoreRegressions, AnyInvalidRowIsInvalidArgumentNamingItAndWritesNothing) {
  auto store = OpenOrDie(Location());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::pair<std::string, Regression>> bad;
  auto add = [&](const std::string& why, auto change) {
    Regression r = TestRegression("c2");
    change(r);
    bad.emplace_back(why, r);
  };
  add("empty commit", [](Regression& r) { r.commit.clear(); });
  add("empty baseline", [](Regression& r) { r.baseline_commit.clear(); });
  add("empty device class", [](Regression& r) { r.device_class.clear(); });
  add("empty problem key", [](Regression& r) { r.problem_key.clear(); });
  add("empty config key", [](Regression& r) { r.config_key.clear(); });
  add("empty metric", [](Regression& r) { r.metric.clear(); });
  add("unknown verdict", [](Regression& r) { r.verdict = "worse"; });
  add("NaN ratio", [&](Regression& r) { r.ratio = nan; });
  add("infinite ratio", [](Regression& r) { r.ratio = std::numeric_limits<double>::infinity(); });
  add("negative ratio", [](Regression& r) { r.ratio = -0.5; });
  add("p-value above 1", [](Regression& r) { r.p_value = 1.5; });
  add("negative p-value", [](Regression& r) { r.p_value = -0.1; });
  add("NaN p-value", [&](Regression& r) { r.p_value = nan; });
  add("negative time", [](Regression& r) { r.created_unix_ms = -1; });
  for (const auto& [why, row] : bad) {
    absl::StatusOr<int> n = store->RecordRegressions({TestRegression("c1"), row});
    EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument) << why << ": " << n.status();
    EXPECT_NE(std::string(n.status().message()).find("regression 1"), std::string::npos) << why << ": " << n.status();
    EXPECT_EQ(store->RecordRegression(row).status().code(), absl::StatusCode::kInvalidArgument) << why;
    EXPECT_TRUE(store->ListRegressions()->empty()) << why;
  }
}

// ---- workers

TEST_P(StoreWorkers, UpsertTouchAndList) {
  auto store = OpenOrDie(Location());
  WorkerRecord w;
  w.worker_id = "host1-gpu0";
  w.host = "host1";
  w.backend = "cuda";
  w.device_class = "cuda/NVIDIA-H200/sm90";
  w.device_json = R"({"name":"NVIDIA H200"})";
  w.registered_unix_ms = 1000;
  ASSERT_TRUE(store->UpsertWorker(w).ok());
  absl::StatusOr<std::vector<WorkerRecord>> list = store->ListWorkers();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].worker_id, w.worker_id);
  EXPECT_EQ((*list)[0].host, w.host);
  EXPECT_EQ((*list)[0].backend, w.backend);
  EXPECT_EQ((*list)[0].device_class, w.device_class);
  EXPECT_EQ((*list)[0].device_json, w.device_json);
  EXPECT_EQ((*list)[0].registered_unix_ms, 1000);
  EXPECT_EQ((*list)[0].last_heartbeat_unix_ms, 1000);  // defaults to the registration time

  ASSERT_TRUE(store->TouchWorker(w.worker_id, 5000).ok());
  EXPECT_EQ(store->ListWorkers()->at(0).last_heartbeat_unix_ms, 5000);
  ASSERT_TRUE(store->TouchWorker(w.worker_id, 4000).ok());  // late heartbeat: never backwards
  EXPECT_EQ(store->ListWorkers()->at(0).last_heartbeat_unix_ms, 5000);
  EXPECT_EQ(store->TouchWorker("ghost", 5000).code(), absl::StatusCode::kNotFound);

  w.host = "host1b";
  w.registered_unix_ms = 9000;
  ASSERT_TRUE(store->UpsertWorker(w).ok());  // re-registration replaces
  list = store->ListWorkers();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].host, "host1b");
  EXPECT_EQ((*list)[0].registered_unix_ms, 9000);
}

TEST_P(StoreTrials, ArbitraryBytesInTextFieldsRoundTrip) {
  auto store = OpenOrDie(Location());
  const int64_t run = *store->BeginRun(TestRun());
  Trial t = TestTrial(run, kProblemA, kConfig1);
  t.outcome = TrialOutcome::kLaunchFailed;
  t.message =
      std::string("cuda error\0after nul \xff\xfe not utf-8 'quoted' \"x\"; DROP TABLE", 58);
  ASSERT_TRUE(store->RecordTrial(t).ok());
  absl::StatusOr<std::vector<Trial>> got = store->ListTrials(run);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  if (IsPostgres()) {
    // PostgreSQL text holds valid UTF-8 without NUL: each byte that is not is stored as
    // U+FFFD, and the rest, quotes and SQL included, exactly.
    EXPECT_EQ((*got)[0].message,
              "cuda error\xEF\xBF\xBD" "after nul \xEF\xBF\xBD\xEF\xBF\xBD not utf-8 'quoted' \"x\"; DROP TABLE");
    return;
  }
  EXPECT_EQ((*got)[0].message, t.message);
  EXPECT_EQ((*got)[0].message.size(), 58u);
}

TEST(StoreSchemaSqlite, MigrationsAreContiguousFromOne) {
  const std::vector<db_internal::Migration>& m = db_internal::Migrations();
  ASSERT_FALSE(m.empty());
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(m[i].version, static_cast<int>(i) + 1);
    EXPECT_TRUE(std::string(m[i].sql) != "" || m[i].rewrite != nullptr) << "migration " << m[i].version << " does nothing";
  }
  EXPECT_EQ(Store::LatestSchemaVersion(), m.back().version);
}

// ---- bad input: InvalidArgument, never a crash, nothing written

TEST_P(StoreBadInput, EmptyKeysAndNonPositiveIdsAreInvalidArgument) {
  auto store = OpenOrDie(Location());
  const int64_t run = *store->BeginRun(TestRun());
  const auto kInvalid = absl::StatusCode::kInvalidArgument;

  Trial t = TestTrial(run, kProblemA, kConfig1);
  Trial no_id = t;
  no_id.trial_id.clear();
  EXPECT_EQ(store->RecordTrial(no_id).code(), kInvalid);
  Trial no_problem = t;
  no_problem.problem_key.clear();
  EXPECT_EQ(store->RecordTrial(no_problem).code(), kInvalid);
  Trial no_config = t;
  no_config.config_key.clear();
  EXPECT_EQ(store->RecordTrial(no_config).code(), kInvalid);
  Trial negative_run = t;
  negative_run.run_id = -1;
  EXPECT_EQ(store->RecordTrial(negative_run).code(), kInvalid);
  Trial zero_run = t;
  zero_run.run_id = 0;
  EXPECT_EQ(store->RecordTrial(zero_run).code(), kInvalid);
  Trial negative_attempt = t;
  negative_attempt.attempt = -3;
  EXPECT_EQ(store->RecordTrial(negative_attempt).code(), kInvalid);
  Trial bad_outcome = t;
  bad_outcome.outcome = static_cast<TrialOutcome>(99);
  EXPECT_EQ(store->RecordTrial(bad_outcome).code(), kInvalid);
  EXPECT_EQ(store->RecordTrials({t, no_id}).code(), kInvalid);
  EXPECT_EQ(*store->CountTrials(run), 0);

  EXPECT_EQ(store->GetRun(-5).status().code(), kInvalid);
  EXPECT_EQ(store->GetRun(0).status().code(), kInvalid);
  EXPECT_EQ(store->FinishRun(-1).code(), kInvalid);
  EXPECT_EQ(store->CountTrials(-1).status().code(), kInvalid);
  EXPECT_EQ(store->ListTrials(-1).status().code(), kInvalid);
  EXPECT_EQ(store->HasTrial("").status().code(), kInvalid);
  EXPECT_EQ(store->FindUnfinishedRun("c", "", "l").status().code(), kInvalid);
  EXPECT_EQ(store->ListTrialsForProblem("", kProblemA, 5).status().code(), kInvalid);
  EXPECT_EQ(store->ListTrialsForProblem("dc", "", 5).status().code(), kInvalid);
  EXPECT_EQ(store->ListTrialsForProblem("dc", kProblemA, 0).status().code(), kInvalid);
  EXPECT_EQ(store->ListTrialsForProblem("dc", kProblemA, -1).status().code(), kInvalid);
  RunInfo bad_run = TestRun();
  bad_run.started_unix_ms = -1;
  EXPECT_EQ(store->BeginRun(bad_run).status().code(), kInvalid);

  BestConfig b = TestBest(run, kProblemA, kConfig1, 1);
  b.device_class.clear();
  EXPECT_EQ(store->UpsertBestConfig(b).code(), kInvalid);
  b = TestBest(run, "", kConfig1, 1);
  EXPECT_EQ(store->UpsertBestConfig(b).code(), kInvalid);
  b = TestBest(run, kProblemA, "", 1);
  EXPECT_EQ(store->UpsertBestConfig(b).code(), kInvalid);
  b = TestBest(-2, kProblemA, kConfig1, 1);
  EXPECT_EQ(store->UpsertBestConfig(b).code(), kInvalid);
  EXPECT_EQ(store->GetBestConfig("", kProblemA).status().code(), kInvalid);
  EXPECT_EQ(store->GetBestConfig("dc", "").status().code(), kInvalid);
  EXPECT_TRUE(store->ListBestConfigs()->empty());

  Regression r;
  EXPECT_EQ(store->RecordRegression(r).status().code(), kInvalid);
  EXPECT_EQ(store->ListRegressions("", 0).status().code(), kInvalid);
  EXPECT_EQ(store->ListRegressions("", 1 << 30).status().code(), kInvalid);

  WorkerRecord w;
  EXPECT_EQ(store->UpsertWorker(w).code(), kInvalid);
  w.worker_id = "w";
  EXPECT_EQ(store->UpsertWorker(w).code(), kInvalid);  // no device class
  EXPECT_EQ(store->TouchWorker("", 1).code(), kInvalid);
  EXPECT_EQ(store->TouchWorker("w", -1).code(), kInvalid);
  EXPECT_TRUE(store->ListWorkers()->empty());
}

}  // namespace
}  // namespace fusetune
