// Trial stages, timing blocks and wall time; the audits table; and the upgrade of a
// version-1 file, whose trials read back as screen trials without blocks.
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "fusetune/db/store.h"
#include "gtest/gtest.h"
#include "schema.h"
#include "sqlite.h"
#include "test_util.h"
#include "testing/store_backends.h"

namespace fusetune {
namespace {

using db_test::KnownState;
using db_test::OpenOrDie;
using db_test::RawQuery;
using db_test::ScopedTempDir;
using db_test::TestRun;
using db_test::TestTrial;

// Every TEST_P below runs on SQLite and on PostgreSQL (testing/store_backends.h).
class StoreAudits : public db_test::StoreBackendTest {};
FUSETUNE_STORE_BACKENDS(StoreAudits);
class StoreTrialStages : public db_test::StoreBackendTest {};
FUSETUNE_STORE_BACKENDS(StoreTrialStages);

constexpr char kProblem[] = "prefill/b1/hq12/hkv12/q128/k128/d64/causal0/fp32";
constexpr char kOtherProblem[] = "prefill/b1/hq12/hkv12/q256/k256/d64/causal0/fp32";
constexpr char kConfigA[] = "fused/bm64/bs32/w2/fp32/st1";
constexpr char kConfigB[] = "fused/bm32/bs64/w2/fp32/st1";
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

// A trial of `stage` with its id derived from its fields, as the tuner writes it.
Trial StagedTrial(int64_t run, const std::string& config, TrialStage stage, int attempt = 0) {
  Trial t = TestTrial(run, kProblem, config, attempt);
  t.stage = stage;
  t.trial_id = TrialId(run, kProblem, config, attempt, stage);
  return t;
}

void ExpectSameState(const DeviceState& a, const DeviceState& b) {
  EXPECT_EQ(a.known, b.known);
  EXPECT_EQ(a.sm_clock_mhz, b.sm_clock_mhz);
  EXPECT_EQ(a.power_mw, b.power_mw);
  EXPECT_EQ(a.throttle_reasons, b.throttle_reasons);
}

void ExpectSameBlocks(const std::vector<SampleBlock>& a, const std::vector<SampleBlock>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(a[i].samples, b[i].samples);
    EXPECT_EQ(a[i].median_us, b[i].median_us);  // exact: JSON round-trips doubles
    EXPECT_EQ(a[i].unsteady, b[i].unsteady);
    ExpectSameState(a[i].before, b[i].before);
    ExpectSameState(a[i].after, b[i].after);
  }
}

// ---- trials: stage, blocks, wall time

TEST_P(StoreTrialStages, StageBlocksAndWallTimeRoundTrip) {
  auto store = OpenOrDie(Location());
  const int64_t run = *store->BeginRun(TestRun());
  Trial screen = StagedTrial(run, kConfigA, TrialStage::kScreen);
  screen.wall_seconds = 0.0421875;
  screen.blocks = {{10, 10.5, KnownState(1980, 512345, 0), KnownState(1980, 530000, 0), false}};
  Trial final_round = StagedTrial(run, kConfigA, TrialStage::kFinal, 1);
  final_round.wall_seconds = 1.0 / 3.0;
  // Large throttle masks (the NVML bits go up to 1 << 8 and beyond), a moved clock, and a
  // block whose device state is unknown (the CPU backend reads none).
  final_round.blocks = {{5, 10.25, KnownState(1980, 690000, 0x4), KnownState(1755, 700001, 0x104), true},
                        {5, 10.75, DeviceState{}, DeviceState{}, false},
                        {0, 0, KnownState(1, 0, (uint64_t{1} << 63) | 1), KnownState(0, 0, 0), false}};
  Trial audit = StagedTrial(run, kConfigB, TrialStage::kAudit, 1);
  audit.blocks = {{3, 12.0, DeviceState{}, KnownState(1500, 1, 0), true}};
  ASSERT_TRUE(store->RecordTrials({screen, final_round, audit}).ok());

  absl::StatusOr<std::vector<Trial>> got = store->ListTrials(run);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 3u);
  const std::vector<Trial> want = {screen, final_round, audit};
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ((*got)[i].trial_id, want[i].trial_id);
    EXPECT_EQ((*got)[i].stage, want[i].stage);
    EXPECT_EQ((*got)[i].wall_seconds, want[i].wall_seconds);
    ExpectSameBlocks(want[i].blocks, (*got)[i].blocks);
  }
  // The history of a shape carries them too.
  absl::StatusOr<std::vector<Trial>> history =
      store->ListTrialsForProblem(db_test::TestDevice().DeviceClass(), kProblem, 10);
  ASSERT_TRUE(history.ok()) << history.status();
  ASSERT_EQ(history->size(), 3u);
  for (const Trial& t : *history) {
    if (t.trial_id == final_round.trial_id) {
      EXPECT_EQ(t.stage, TrialStage::kFinal);
      ExpectSameBlocks(final_round.blocks, t.blocks);
    }
  }
}

TEST(StoreTrialStagesSqlite, BlocksAreStoredWithTheDocumentedKeys) {
  ScopedTempDir dir;
  const std::string path = dir.File("keys.db");
  auto store = OpenOrDie(path);
  const int64_t run = *store->BeginRun(TestRun());
  Trial t = StagedTrial(run, kConfigA, TrialStage::kFinal, 1);
  t.wall_seconds = 0.5;
  t.blocks = {{7, 2.5, KnownState(1980, 650000, 4), DeviceState{}, true}};
  ASSERT_TRUE(store->RecordTrial(t).ok());
  EXPECT_EQ(RawQuery(path, "SELECT stage || ' ' || wall_seconds FROM trials"), "final 0.5");
  EXPECT_EQ(RawQuery(path, "SELECT blocks_json FROM trials"),
            R"([{"b":{"mhz":1980,"mw":650000,"thr":4},"n":7,"u":true,"us":2.5}])");
}

TEST_P(StoreTrialStages, TheSameConfigAtEachStageIsItsOwnRow) {
  auto store = OpenOrDie(Location());
  const int64_t run = *store->BeginRun(TestRun());
  const std::vector<TrialStage> stages = {TrialStage::kScreen, TrialStage::kHalving, TrialStage::kFinal,
                                          TrialStage::kAudit};
  std::vector<Trial> trials;
  for (TrialStage stage : stages) trials.push_back(StagedTrial(run, kConfigA, stage));
  absl::StatusOr<int> inserted = store->RecordTrialsCountingNew(trials);
  ASSERT_TRUE(inserted.ok()) << inserted.status();
  EXPECT_EQ(*inserted, 4);
  absl::StatusOr<std::vector<Trial>> got = store->ListTrials(run);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), stages.size());
  for (size_t i = 0; i < stages.size(); ++i) EXPECT_EQ((*got)[i].stage, stages[i]) << TrialStageName(stages[i]);
  // A retry of the final trial is still a duplicate.
  EXPECT_EQ(*store->RecordTrialsCountingNew({StagedTrial(run, kConfigA, TrialStage::kFinal)}), 0);
}

TEST_P(StoreTrialStages, BadStageBlocksWallTimeOrIdAreInvalidArgumentAndWriteNothing) {
  auto store = OpenOrDie(Location());
  const int64_t run = *store->BeginRun(TestRun());
  const Trial good = StagedTrial(run, kConfigA, TrialStage::kFinal, 1);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::pair<std::string, Trial>> cases;
  auto add = [&](const std::string& what, auto change) {
    Trial t = good;
    change(t);
    cases.emplace_back(what, t);
  };
  add("unknown stage", [](Trial& t) { t.stage = static_cast<TrialStage>(7); });
  add("negative wall", [](Trial& t) { t.wall_seconds = -0.1; });
  add("NaN wall", [&](Trial& t) { t.wall_seconds = nan; });
  add("infinite wall", [&](Trial& t) { t.wall_seconds = inf; });
  add("negative samples", [](Trial& t) { t.blocks = {{-1, 1.0, {}, {}, false}}; });
  add("negative block median", [](Trial& t) { t.blocks = {{3, -1.0, {}, {}, false}}; });
  add("NaN block median", [&](Trial& t) { t.blocks = {{3, nan, {}, {}, false}}; });
  add("infinite block median", [&](Trial& t) { t.blocks = {{3, inf, {}, {}, false}}; });
  add("negative clock", [](Trial& t) { t.blocks = {{3, 1.0, KnownState(-5, 0, 0), {}, false}}; });
  add("negative power", [](Trial& t) { t.blocks = {{3, 1.0, {}, KnownState(1, -1, 0), false}}; });
  // The screen trial's id on a final trial would make it a duplicate of the screen row.
  add("screen id on a final trial",
      [&](Trial& t) { t.trial_id = TrialId(run, kProblem, kConfigA, 1, TrialStage::kScreen); });
  add("id of another attempt", [&](Trial& t) { t.trial_id = TrialId(run, kProblem, kConfigA, 2, TrialStage::kFinal); });
  add("made-up id", [](Trial& t) { t.trial_id = "0123456789abcdef0123456789abcdef"; });
  for (const auto& [what, t] : cases) {
    EXPECT_EQ(store->RecordTrial(t).code(), kInvalid) << what;
    EXPECT_EQ(store->RecordTrials({good, t}).code(), kInvalid) << what << " (in a batch)";
  }
  EXPECT_EQ(*store->CountTrials(run), 0);
  absl::Status ok = store->RecordTrial(good);
  EXPECT_TRUE(ok.ok()) << ok;
}

// ---- audits

AuditSummary TestAudit(int64_t run, const std::string& problem, int64_t created) {
  AuditSummary a;
  a.run_id = run;
  a.device_class = db_test::TestDevice().DeviceClass();
  a.problem_key = problem;
  a.recorded_config_key = kConfigA;
  a.best_config_key = kConfigB;
  a.recorded_us = 10.5;
  a.best_us = 10.0;
  a.regret = 0.05;
  a.regret_low = 0.01;
  a.regret_high = 1.0 / 11.0;
  a.rounds = 15;
  a.configs_measured = 18;
  a.configs_failed = 2;
  a.commit = "abc123";
  a.created_unix_ms = created;
  return a;
}

void ExpectSameAudit(const AuditSummary& a, const AuditSummary& b) {
  EXPECT_EQ(a.run_id, b.run_id);
  EXPECT_EQ(a.device_class, b.device_class);
  EXPECT_EQ(a.problem_key, b.problem_key);
  EXPECT_EQ(a.recorded_config_key, b.recorded_config_key);
  EXPECT_EQ(a.best_config_key, b.best_config_key);
  EXPECT_EQ(a.recorded_us, b.recorded_us);
  EXPECT_EQ(a.best_us, b.best_us);
  EXPECT_EQ(a.regret, b.regret);
  EXPECT_EQ(a.regret_low, b.regret_low);
  EXPECT_EQ(a.regret_high, b.regret_high);
  EXPECT_EQ(a.rounds, b.rounds);
  EXPECT_EQ(a.configs_measured, b.configs_measured);
  EXPECT_EQ(a.configs_failed, b.configs_failed);
  EXPECT_EQ(a.commit, b.commit);
  EXPECT_EQ(a.created_unix_ms, b.created_unix_ms);
}

TEST_P(StoreAudits, RoundTripNewestFirstAndFilters) {
  auto store = OpenOrDie(Location());
  const int64_t run = *store->BeginRun(TestRun());
  const AuditSummary older = TestAudit(run, kProblem, 1000);
  AuditSummary newer = TestAudit(run, kProblem, 2000);
  newer.best_config_key = kConfigA;  // the recorded config was the best
  newer.regret = 0;
  AuditSummary other_problem = TestAudit(run, kOtherProblem, 1500);
  AuditSummary other_device = TestAudit(0, kProblem, 3000);  // no run
  other_device.device_class = "cuda/NVIDIA-H200/sm90";
  std::vector<int64_t> ids;
  for (const AuditSummary& a : {older, newer, other_problem, other_device}) {
    absl::StatusOr<int64_t> id = store->RecordAudit(a);
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  EXPECT_LT(ids[0], ids[1]);

  absl::StatusOr<std::vector<AuditSummary>> all = store->ListAudits();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].audit_id, ids[3]);
  EXPECT_EQ((*all)[0].run_id, 0);
  EXPECT_EQ((*all)[1].audit_id, ids[1]);
  EXPECT_EQ((*all)[2].audit_id, ids[2]);
  EXPECT_EQ((*all)[3].audit_id, ids[0]);
  ExpectSameAudit(newer, (*all)[1]);
  ExpectSameAudit(older, (*all)[3]);

  const std::string cpu = db_test::TestDevice().DeviceClass();
  absl::StatusOr<std::vector<AuditSummary>> one = store->ListAudits(cpu, kProblem);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 2u);
  EXPECT_EQ((*one)[0].audit_id, ids[1]);
  EXPECT_EQ((*one)[1].audit_id, ids[0]);
  EXPECT_EQ(store->ListAudits(cpu)->size(), 3u);
  EXPECT_EQ(store->ListAudits("", kProblem)->size(), 3u);
  EXPECT_EQ(store->ListAudits(cpu, kProblem, 1)->size(), 1u);
  EXPECT_TRUE(store->ListAudits("no/such/class")->empty());
}

TEST_P(StoreAudits, UnknownRegretIsNaNAfterARoundTrip) {
  auto store = OpenOrDie(Location());
  AuditSummary a = TestAudit(0, kProblem, 1000);
  a.regret = a.regret_low = a.regret_high = std::numeric_limits<double>::quiet_NaN();
  ASSERT_TRUE(store->RecordAudit(a).ok());
  absl::StatusOr<std::vector<AuditSummary>> got = store->ListAudits();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_TRUE(std::isnan((*got)[0].regret));
  EXPECT_TRUE(std::isnan((*got)[0].regret_high));
}

TEST_P(StoreAudits, BadInputIsInvalidArgumentAndUnknownRunIsNotFound) {
  auto store = OpenOrDie(Location());
  const int64_t run = *store->BeginRun(TestRun());
  const AuditSummary good = TestAudit(run, kProblem, 1000);
  std::vector<std::pair<std::string, AuditSummary>> cases;
  auto add = [&](const std::string& what, auto change) {
    AuditSummary a = good;
    change(a);
    cases.emplace_back(what, a);
  };
  add("no device class", [](AuditSummary& a) { a.device_class.clear(); });
  add("no problem", [](AuditSummary& a) { a.problem_key.clear(); });
  add("no recorded config", [](AuditSummary& a) { a.recorded_config_key.clear(); });
  add("no best config", [](AuditSummary& a) { a.best_config_key.clear(); });
  add("negative run", [](AuditSummary& a) { a.run_id = -1; });
  add("negative rounds", [](AuditSummary& a) { a.rounds = -1; });
  add("negative measured", [](AuditSummary& a) { a.configs_measured = -1; });
  add("negative failed", [](AuditSummary& a) { a.configs_failed = -1; });
  add("negative time", [](AuditSummary& a) { a.best_us = -1; });
  add("negative created", [](AuditSummary& a) { a.created_unix_ms = -1; });
  for (const auto& [what, a] : cases) {
    EXPECT_EQ(store->RecordAudit(a).status().code(), kInvalid) << what;
  }
  AuditSummary unknown_run = good;
  unknown_run.run_id = run + 100;
  EXPECT_EQ(store->RecordAudit(unknown_run).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store->ListAudits()->empty());
  EXPECT_EQ(store->ListAudits("", "", 0).status().code(), kInvalid);
  EXPECT_EQ(store->ListAudits("", "", 100001).status().code(), kInvalid);
}

TEST_P(StoreAudits, ReadOnlyStoreRefusesToRecord) {
  const std::string path = Location();
  { OpenOrDie(path); }
  StoreOptions options;
  options.access = StoreAccess::kReadOnly;
  absl::StatusOr<std::unique_ptr<Store>> reader = Store::Open(path, options);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->RecordAudit(TestAudit(0, kProblem, 1)).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE((*reader)->ListAudits()->empty());
}

// ---- a file written by a binary with schema version 1

TEST(StoreUpgrade, VersionOneFileMigratesAndItsTrialsReadBackAsScreenTrials) {
  ScopedTempDir dir;
  const std::string path = dir.File("v1.db");
  const std::string trial_id = TrialId(1, kProblem, kConfigA, 0);
  ASSERT_EQ(db_test::WriteSchemaVersion(path, 1), absl::OkStatus());  // what the version-1 binary created
  ASSERT_EQ(RawQuery(path, "PRAGMA user_version"), "1");
  RawQuery(path,
           "INSERT INTO runs (commit_hash, host, device_class, device_json, backend, tool_version, "
           "environment, label, started_unix_ms) VALUES ('old', 'h', 'cpu/Test-CPU/x86_64-avx2', "
           "'{\"backend\":\"cpu\"}', 'cpu', '0.1.0', '', 'sweep', 1700000000000)");
  RawQuery(path, "INSERT INTO trials (trial_id, run_id, problem_key, config_key, attempt, outcome, "
                 "message, samples_json, median_us, p10_us, p90_us, max_abs_error, max_rel_error, "
                 "checked_elements, sm_clock_mhz, flops, created_unix_ms) VALUES ('" +
                     trial_id + "', 1, '" + kProblem + "', '" + kConfigA +
                     "', 0, 'ok', '', '[1.5,2.5]', 2.0, 1.5, 2.5, 0, 0, 64, 0, 1e6, 1700000000500)");
  ASSERT_EQ(RawQuery(path, "SELECT COUNT(*) FROM trials"), "1");

  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->SchemaVersion(), Store::LatestSchemaVersion());
  absl::StatusOr<std::vector<Trial>> trials = store->ListTrials(1);
  ASSERT_TRUE(trials.ok()) << trials.status();
  ASSERT_EQ(trials->size(), 1u);
  const Trial& old = (*trials)[0];
  EXPECT_EQ(old.trial_id, trial_id);
  EXPECT_EQ(old.stage, TrialStage::kScreen);
  EXPECT_TRUE(old.blocks.empty());
  EXPECT_EQ(old.wall_seconds, 0);
  EXPECT_EQ(old.median_us, 2.0);
  EXPECT_EQ(old.samples_us, (std::vector<double>{1.5, 2.5}));
  // The old row's id still identifies it: a re-upload of the same screen trial is a duplicate.
  Trial again = TestTrial(1, kProblem, kConfigA);
  EXPECT_EQ(*store->RecordTrialsCountingNew({again}), 0);
  // The new columns and table work on the upgraded file.
  Trial final_round = StagedTrial(1, kConfigA, TrialStage::kFinal, 1);
  final_round.blocks = {{4, 2.25, {}, {}, false}};
  final_round.wall_seconds = 0.25;
  ASSERT_TRUE(store->RecordTrial(final_round).ok());
  EXPECT_EQ(store->ListTrials(1)->back().stage, TrialStage::kFinal);
  ASSERT_TRUE(store->RecordAudit(TestAudit(1, kProblem, 5)).ok());
  EXPECT_EQ(store->ListAudits()->size(), 1u);
  // The stage column refuses a name outside the three.
  EXPECT_EQ(RawQuery(path, "UPDATE trials SET stage = 'bogus'"), "<error>");
  EXPECT_EQ(RawQuery(path, "SELECT COUNT(*) FROM trials WHERE stage = 'screen'"), "1");
}

// ---- a file written by a binary with schema version 4 (before the interrupted and
// resource_exhausted outcomes)

TEST(StoreUpgrade, VersionFourFileKeepsItsTrialsAndBenchCellsAndTakesTheNewOutcomes) {
  ScopedTempDir dir;
  const std::string path = dir.File("v4.db");
  ASSERT_EQ(db_test::WriteSchemaVersion(path, 4), absl::OkStatus());  // what the version-4 binary created
  ASSERT_EQ(RawQuery(path, "PRAGMA user_version"), "4");
  RawQuery(path,
           "INSERT INTO runs (commit_hash, host, device_class, device_json, backend, tool_version, "
           "environment, label, started_unix_ms) VALUES ('old', 'h', 'cpu/Test-CPU/x86_64-avx2', "
           "'{\"backend\":\"cpu\"}', 'cpu', '0.1.0', '', 'sweep', 1700000000000)");
  RawQuery(path, "INSERT INTO trials (trial_id, run_id, problem_key, config_key, attempt, outcome, "
                 "message, samples_json, median_us, p10_us, p90_us, max_abs_error, max_rel_error, "
                 "checked_elements, sm_clock_mhz, flops, created_unix_ms, stage, blocks_json, wall_seconds) "
                 "VALUES ('" + TrialId(1, kProblem, kConfigA, 0) + "', 1, '" + kProblem + "', '" + kConfigA +
                 "', 0, 'timed_out', 'slow', '[]', NULL, NULL, NULL, 0, 0, 0, 0, 1e6, 1700000000500, 'screen', '[]', 61)");
  RawQuery(path, std::string("INSERT INTO bench_cells (run_id, suite, problem_key, problem_json, config_key, role, "
                             "outcome, created_unix_ms) VALUES (1, 'cpu', '") + kProblem + "', '{}', '" + kConfigA +
                 "', 'best', 'ok', 1700000000600)");
  // The old CHECK refuses the new names.
  EXPECT_EQ(RawQuery(path, "UPDATE trials SET outcome = 'interrupted'"), "<error>");

  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->SchemaVersion(), Store::LatestSchemaVersion());
  absl::StatusOr<std::vector<Trial>> trials = store->ListTrials(1);
  ASSERT_TRUE(trials.ok()) << trials.status();
  ASSERT_EQ(trials->size(), 1u);
  EXPECT_EQ((*trials)[0].outcome, TrialOutcome::kTimedOut);
  EXPECT_EQ((*trials)[0].message, "slow");
  EXPECT_EQ((*trials)[0].wall_seconds, 61);
  EXPECT_EQ(RawQuery(path, "SELECT COUNT(*) FROM bench_cells WHERE outcome = 'ok' AND suite = 'cpu'"), "1");
  EXPECT_EQ(RawQuery(path, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name IN "
                           "('trials_by_run_problem', 'trials_by_problem_created', 'bench_cells_by_suite_run')"),
            "3");
  for (TrialOutcome outcome : {TrialOutcome::kInterrupted, TrialOutcome::kResourceExhausted}) {
    Trial t = StagedTrial(1, kConfigB, TrialStage::kScreen, outcome == TrialOutcome::kInterrupted ? 0 : 1);
    t.outcome = outcome;
    t.message = "stopped";
    t.samples_us.clear();
    t.blocks.clear();
    ASSERT_TRUE(store->RecordTrial(t).ok()) << TrialOutcomeName(outcome);
  }
  absl::StatusOr<std::vector<Trial>> now = store->ListTrials(1);
  ASSERT_TRUE(now.ok());
  ASSERT_EQ(now->size(), 3u);
  EXPECT_EQ((*now)[1].outcome, TrialOutcome::kInterrupted);
  EXPECT_EQ((*now)[2].outcome, TrialOutcome::kResourceExhausted);
}

// ---- a file written by a binary with schema version 7 (before unquantised_rel_error)

TEST(StoreUpgrade, VersionSevenTrialsReadBackWithoutAnUnquantisedError) {
  ScopedTempDir dir;
  const std::string path = dir.File("v7.db");
  ASSERT_EQ(db_test::WriteSchemaVersion(path, 7), absl::OkStatus());  // what the version-7 binary created
  ASSERT_EQ(RawQuery(path, "SELECT COUNT(*) FROM pragma_table_info('trials') WHERE name = 'unquantised_rel_error'"),
            "0");
  RawQuery(path,
           "INSERT INTO runs (commit_hash, host, device_class, device_json, backend, tool_version, "
           "environment, label, started_unix_ms) VALUES ('old', 'h', 'cpu/Test-CPU/x86_64-avx2', "
           "'{\"backend\":\"cpu\"}', 'cpu', '0.1.0', '', 'sweep', 1700000000000)");
  RawQuery(path, "INSERT INTO trials (trial_id, run_id, problem_key, config_key, attempt, outcome, "
                 "message, samples_json, median_us, p10_us, p90_us, max_abs_error, max_rel_error, "
                 "checked_elements, sm_clock_mhz, flops, created_unix_ms, stage, blocks_json, wall_seconds) "
                 "VALUES ('" + TrialId(1, kProblem, kConfigA, 0) + "', 1, '" + kProblem + "', '" + kConfigA +
                 "', 0, 'ok', '', '[1.5]', 1.5, 1.5, 1.5, 1e-6, 2e-6, 64, 0, 1e6, 1700000000500, 'screen', '[]', 2)");
  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->SchemaVersion(), Store::LatestSchemaVersion());
  ASSERT_GE(Store::LatestSchemaVersion(), 8);
  absl::StatusOr<std::vector<Trial>> trials = store->ListTrials(1);
  ASSERT_TRUE(trials.ok()) << trials.status();
  ASSERT_EQ(trials->size(), 1u);
  EXPECT_EQ((*trials)[0].max_rel_error, 2e-6);
  EXPECT_EQ((*trials)[0].unquantised_rel_error, 0.0);
  Trial quantised = StagedTrial(1, kConfigB, TrialStage::kScreen);
  quantised.unquantised_rel_error = 0.03;
  ASSERT_TRUE(store->RecordTrial(quantised).ok());
  EXPECT_EQ(RawQuery(path, "SELECT unquantised_rel_error FROM trials WHERE config_key = '" + std::string(kConfigB) + "'"),
            "0.03");
}

}  // namespace
}  // namespace fusetune
