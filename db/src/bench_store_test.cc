// The bench_cells table: cells round-trip with their blocks and device state, a re-recorded
// cell replaces its row, bad input writes nothing, bench runs are found by suite, device class
// and commit, stored commits by prefix, a version-2 file upgrades keeping its rows, and a
// version-4 file's commits are rewritten in canonical form.
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
using db_test::TestDevice;
using db_test::TestRun;

// Every TEST_P below runs on SQLite and on PostgreSQL (testing/store_backends.h).
class StoreBenchCells : public db_test::StoreBackendTest {};
FUSETUNE_STORE_BACKENDS(StoreBenchCells);
class StoreBenchRuns : public db_test::StoreBackendTest {};
FUSETUNE_STORE_BACKENDS(StoreBenchRuns);
class StoreCommits : public db_test::StoreBackendTest {};
FUSETUNE_STORE_BACKENDS(StoreCommits);

constexpr char kSuite[] = "cpu-nightly";
constexpr char kProblem[] = "prefill/b1/hq12/hkv12/q128/k128/d64/causal0/fp32";
constexpr char kProblemJson[] = R"({"kind":"prefill","q_lens":[128],"k_lens":[128]})";
constexpr char kConfigA[] = "fused/bm64/bs32/w2/fp32/st1";
constexpr char kConfigB[] = "fused/bm32/bs64/w2/fp32/st1";
constexpr char kCommitA[] = "0123456789abcdef0123456789abcdef01234567";
constexpr char kCommitB[] = "0123456fffffffffffffffffffffffffffffffff";
constexpr char kCommitC[] = "89abcdef00000000000000000000000000000000";
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

BenchCell Cell(const std::string& config, const std::string& role, double median_us) {
  BenchCell c;
  c.suite = kSuite;
  c.problem_key = kProblem;
  c.problem_json = kProblemJson;
  c.config_key = config;
  c.role = role;
  c.max_abs_error = 1e-6;
  c.max_rel_error = 2e-6;
  c.tolerance = 1e-4;
  c.blocks = {{50, median_us, KnownState(1980, 450000, 0), KnownState(1965, 460000, 4), true},
              {50, median_us * 1.01, {}, {}, false}};
  c.created_unix_ms = 1700000000999;
  return c;
}

// A finished run of `commit` on `device` holding one cell of `suite`.
int64_t BenchRun(Store& store, const std::string& commit, const std::string& suite = kSuite,
                 const DeviceInfo& device = TestDevice()) {
  RunInfo info = TestRun(commit, "bench");
  info.device = device;
  const int64_t run = *store.BeginRun(info);
  BenchCell cell = Cell(kConfigA, "best", 10);
  cell.suite = suite;
  EXPECT_TRUE(store.RecordBenchCells(run, {cell}).ok());
  EXPECT_TRUE(store.FinishRun(run).ok());
  return run;
}

// The cells stored for `run` (each of these tests has one run).
int64_t CellRows(Store& store, int64_t run) {
  absl::StatusOr<std::vector<BenchCell>> cells = store.ListBenchCells(run);
  return cells.ok() ? static_cast<int64_t>(cells->size()) : -1;
}

TEST_P(StoreBenchCells, RoundTripKeepsBlocksWithDeviceStateInInsertionOrder) {
  auto store = OpenOrDie(Location());
  const int64_t run = *store->BeginRun(TestRun(kCommitA, "bench"));
  BenchCell failed = Cell(kConfigB, "reference", 20);
  failed.outcome = TrialOutcome::kLaunchFailed;
  failed.message = "too much shared memory";
  failed.blocks.clear();
  ASSERT_TRUE(store->RecordBenchCells(run, {Cell(kConfigA, "best", 10), failed}).ok());

  absl::StatusOr<std::vector<BenchCell>> got = store->ListBenchCells(run);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  const BenchCell& a = (*got)[0];
  EXPECT_EQ(a.run_id, run);
  EXPECT_EQ(a.suite, kSuite);
  EXPECT_EQ(a.problem_key, kProblem);
  EXPECT_EQ(a.problem_json, kProblemJson);
  EXPECT_EQ(a.config_key, kConfigA);
  EXPECT_EQ(a.role, "best");
  EXPECT_EQ(a.outcome, TrialOutcome::kOk);
  EXPECT_EQ(a.max_abs_error, 1e-6);
  EXPECT_EQ(a.max_rel_error, 2e-6);
  EXPECT_EQ(a.tolerance, 1e-4);
  EXPECT_EQ(a.created_unix_ms, 1700000000999);
  ASSERT_EQ(a.blocks.size(), 2u);
  EXPECT_EQ(a.blocks[0].samples, 50);
  EXPECT_EQ(a.blocks[0].median_us, 10);
  EXPECT_TRUE(a.blocks[0].unsteady);
  EXPECT_TRUE(a.blocks[0].before.known);
  EXPECT_EQ(a.blocks[0].before.sm_clock_mhz, 1980);
  EXPECT_EQ(a.blocks[0].after.power_mw, 460000);
  EXPECT_EQ(a.blocks[0].after.throttle_reasons, 4u);
  EXPECT_FALSE(a.blocks[1].before.known);
  EXPECT_EQ(a.SamplesUs(), (std::vector<double>{10, 10.1}));
  const BenchCell& b = (*got)[1];
  EXPECT_EQ(b.outcome, TrialOutcome::kLaunchFailed);
  EXPECT_EQ(b.message, "too much shared memory");
  EXPECT_TRUE(b.blocks.empty());
}

TEST(StoreBenchCellsSqlite, SamplesColumnHoldsTheBlockMediansForSqlReaders) {
  ScopedTempDir dir;
  const std::string path = dir.File("b.db");
  auto store = OpenOrDie(path);
  const int64_t run = *store->BeginRun(TestRun(kCommitA, "bench"));
  ASSERT_TRUE(store->RecordBenchCells(run, {Cell(kConfigA, "best", 4)}).ok());
  EXPECT_EQ(RawQuery(path, "SELECT samples_us_json FROM bench_cells"), "[4.0,4.04]");
}

TEST_P(StoreBenchCells, RerecordedCellReplacesItsRowAndKeepsItsPlace) {
  const std::string path = Location();
  auto store = OpenOrDie(path);
  const int64_t run = *store->BeginRun(TestRun(kCommitA, "bench"));
  ASSERT_TRUE(store->RecordBenchCells(run, {Cell(kConfigA, "best", 10), Cell(kConfigB, "best", 12)}).ok());
  // Same (problem, config) under another role is another cell.
  ASSERT_TRUE(store->RecordBenchCells(run, {Cell(kConfigA, "best", 9), Cell(kConfigA, "pick", 11)}).ok());
  EXPECT_EQ(CellRows(*store, run), 3);
  absl::StatusOr<std::vector<BenchCell>> got = store->ListBenchCells(run);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 3u);
  EXPECT_EQ((*got)[0].config_key, kConfigA);
  EXPECT_EQ((*got)[0].blocks[0].median_us, 9);
  EXPECT_EQ((*got)[1].config_key, kConfigB);
  EXPECT_EQ((*got)[2].role, "pick");
}

TEST_P(StoreBenchCells, EachInvalidCellIsInvalidArgumentAndWritesNothing) {
  const std::string path = Location();
  auto store = OpenOrDie(path);
  const int64_t run = *store->BeginRun(TestRun(kCommitA, "bench"));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::pair<std::string, BenchCell>> bad;
  auto add = [&](const std::string& why, auto change) {
    BenchCell c = Cell(kConfigB, "best", 10);
    change(c);
    bad.emplace_back(why, c);
  };
  add("empty suite", [](BenchCell& c) { c.suite.clear(); });
  add("empty problem key", [](BenchCell& c) { c.problem_key.clear(); });
  add("empty problem json", [](BenchCell& c) { c.problem_json.clear(); });
  add("empty config key", [](BenchCell& c) { c.config_key.clear(); });
  add("empty role", [](BenchCell& c) { c.role.clear(); });
  add("unknown outcome", [](BenchCell& c) { c.outcome = static_cast<TrialOutcome>(99); });
  add("NaN abs error", [&](BenchCell& c) { c.max_abs_error = nan; });
  add("negative rel error", [](BenchCell& c) { c.max_rel_error = -1; });
  add("infinite tolerance", [&](BenchCell& c) { c.tolerance = inf; });
  add("zero block median", [](BenchCell& c) { c.blocks[1].median_us = 0; });
  add("negative block median", [](BenchCell& c) { c.blocks[0].median_us = -3; });
  add("NaN block median", [&](BenchCell& c) { c.blocks[0].median_us = nan; });
  add("negative block samples", [](BenchCell& c) { c.blocks[0].samples = -1; });
  add("negative clock", [](BenchCell& c) { c.blocks[0].before.sm_clock_mhz = -1; });
  add("other run's cell", [&](BenchCell& c) { c.run_id = run + 1; });
  add("negative time", [](BenchCell& c) { c.created_unix_ms = -1; });
  for (const auto& [why, cell] : bad) {
    // The good cell first: it must not be written either.
    absl::Status st = store->RecordBenchCells(run, {Cell(kConfigA, "best", 10), cell});
    EXPECT_EQ(st.code(), kInvalid) << why << ": " << st;
    EXPECT_NE(std::string(st.message()).find("bench cell 1"), std::string::npos) << why << ": " << st;
    EXPECT_EQ(CellRows(*store, run), 0) << why;
  }
  EXPECT_EQ(store->RecordBenchCells(0, {Cell(kConfigA, "best", 10)}).code(), kInvalid);
  EXPECT_EQ(store->RecordBenchCells(run + 5, {Cell(kConfigA, "best", 10)}).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->ListBenchCells(run + 5).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(CellRows(*store, run), 0);
  EXPECT_TRUE(store->RecordBenchCells(run, {}).ok());
}

TEST_P(StoreBenchRuns, SuitesAreListedOnceEachSortedByName) {
  auto store = OpenOrDie(Location());
  EXPECT_TRUE(store->ListBenchSuites()->empty());
  BenchRun(*store, kCommitA, "zeta");
  BenchRun(*store, kCommitC, "zeta");
  BenchRun(*store, kCommitA, "alpha");
  EXPECT_EQ(*store->ListBenchSuites(), (std::vector<std::string>{"alpha", "zeta"}));
}

TEST_P(StoreBenchRuns, ListedNewestFirstFinishedOnlyAndFilteredBySuiteAndDeviceClass) {
  auto store = OpenOrDie(Location());
  DeviceInfo other = TestDevice("Other CPU");
  const int64_t first = BenchRun(*store, kCommitA);
  const int64_t second = BenchRun(*store, kCommitC);
  const int64_t elsewhere = BenchRun(*store, kCommitC, kSuite, other);
  BenchRun(*store, kCommitC, "other-suite");
  const int64_t unfinished = *store->BeginRun(TestRun(kCommitC, "bench"));
  ASSERT_TRUE(store->RecordBenchCells(unfinished, {Cell(kConfigA, "best", 10)}).ok());
  store->BeginRun(TestRun(kCommitC, "sweep")).IgnoreError();  // no cells: not a bench run

  absl::StatusOr<std::vector<RunInfo>> here = store->ListBenchRuns(kSuite, TestDevice().DeviceClass(), 10);
  ASSERT_TRUE(here.ok()) << here.status();
  ASSERT_EQ(here->size(), 2u);
  EXPECT_EQ((*here)[0].run_id, second);
  EXPECT_EQ((*here)[1].run_id, first);
  absl::StatusOr<std::vector<RunInfo>> any = store->ListBenchRuns(kSuite, "", 10);
  ASSERT_TRUE(any.ok()) << any.status();
  ASSERT_EQ(any->size(), 3u);
  EXPECT_EQ((*any)[0].run_id, elsewhere);
  EXPECT_EQ(store->ListBenchRuns(kSuite, "", 1)->size(), 1u);
  EXPECT_TRUE(store->ListBenchRuns("no-such-suite", "", 10)->empty());
  EXPECT_EQ(store->ListBenchRuns("", "", 10).status().code(), kInvalid);
  EXPECT_EQ(store->ListBenchRuns(kSuite, "", 0).status().code(), kInvalid);
}

TEST_P(StoreBenchRuns, FindMatchesTheCommitExactly) {
  auto store = OpenOrDie(Location());
  const std::string cls = TestDevice().DeviceClass();
  BenchRun(*store, kCommitA);
  const int64_t newer_a = BenchRun(*store, kCommitA);
  const int64_t c = BenchRun(*store, kCommitC);
  absl::StatusOr<RunInfo> full = store->FindBenchRun(kSuite, cls, kCommitA);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->run_id, newer_a);
  EXPECT_EQ(store->FindBenchRun(kSuite, "", kCommitC)->run_id, c);
  // Abbreviations are resolved before (CommitsStartingWith): here a prefix is just another name.
  EXPECT_EQ(store->FindBenchRun(kSuite, cls, "89abcde").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->FindBenchRun(kSuite, cls, "").status().code(), kInvalid);
  EXPECT_EQ(store->FindBenchRun("", cls, kCommitA).status().code(), kInvalid);
}

TEST_P(StoreCommits, EveryStoredCommitWithThePrefixIsListedOnceAndSorted) {
  auto store = OpenOrDie(Location());
  BenchRun(*store, kCommitB);
  BenchRun(*store, kCommitA);
  BenchRun(*store, kCommitA);
  Regression r;
  r.commit = "0123456000000";
  r.baseline_commit = "0123456111111";
  r.device_class = TestDevice().DeviceClass();
  r.problem_key = kProblem;
  r.config_key = kConfigA;
  r.metric = "latency";
  r.ratio = 1;
  r.p_value = 1;
  r.verdict = "same";
  ASSERT_TRUE(store->RecordRegression(r).ok());
  Job job;
  job.device_class = r.device_class;
  job.commit = "0123456222222";
  job.problem_keys = {kProblem};
  job.spec_json = "{}";
  ASSERT_TRUE(store->EnqueueJob(job).ok());
  absl::StatusOr<std::vector<std::string>> all = store->CommitsStartingWith("0123456");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, (std::vector<std::string>{"0123456000000", "0123456111111", "0123456222222", kCommitA, kCommitB}));
  EXPECT_EQ(*store->CommitsStartingWith("01234567"), std::vector<std::string>{kCommitA});
  EXPECT_EQ(store->CommitsStartingWith("0123456", 2)->size(), 2u);
  EXPECT_TRUE(store->CommitsStartingWith("fedcba9")->empty());
  EXPECT_EQ(store->CommitsStartingWith("").status().code(), kInvalid);
  EXPECT_EQ(store->CommitsStartingWith("0123456", 0).status().code(), kInvalid);
}

TEST_P(StoreBenchRuns, FindAcceptsAnyExactCommitText) {
  auto store = OpenOrDie(Location());
  const int64_t run = BenchRun(*store, "local-dirty");
  absl::StatusOr<RunInfo> got = store->FindBenchRun(kSuite, "", "local-dirty");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->run_id, run);
}

TEST_P(StoreBenchRuns, FindUnknownCommitNamesWhatExists) {
  auto store = OpenOrDie(Location());
  const std::string cls = TestDevice().DeviceClass();
  BenchRun(*store, kCommitA);
  BenchRun(*store, kCommitC);
  absl::StatusOr<RunInfo> unknown = store->FindBenchRun(kSuite, cls, "fedcba9");
  ASSERT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();
  const std::string message(unknown.status().message());
  for (const std::string& part : {std::string(kSuite), cls, std::string("fedcba9"), std::string(kCommitA),
                                  std::string(kCommitC)}) {
    EXPECT_NE(message.find(part), std::string::npos) << part << " not in: " << message;
  }
  EXPECT_LT(message.find(kCommitC), message.find(kCommitA)) << "newest first: " << message;

  // A baseline looked for on another device class: the message says where the suite ran.
  const std::string other = TestDevice("Other CPU").DeviceClass();
  absl::StatusOr<RunInfo> elsewhere = store->FindBenchRun(kSuite, other, kCommitA);
  ASSERT_EQ(elsewhere.status().code(), absl::StatusCode::kNotFound) << elsewhere.status();
  EXPECT_NE(std::string(elsewhere.status().message()).find(other), std::string::npos) << elsewhere.status();
  EXPECT_NE(std::string(elsewhere.status().message()).find(cls), std::string::npos) << elsewhere.status();

  absl::StatusOr<RunInfo> empty = OpenOrDie(NewLocation())->FindBenchRun(kSuite, cls, kCommitA);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kNotFound) << empty.status();
}

TEST_P(StoreBenchCells, ReadOnlyStoreRefusesToRecord) {
  const std::string path = Location();
  int64_t run = 0;
  {
    auto store = OpenOrDie(path);
    run = *store->BeginRun(TestRun(kCommitA, "bench"));
  }
  StoreOptions options;
  options.access = StoreAccess::kReadOnly;
  absl::StatusOr<std::unique_ptr<Store>> reader = Store::Open(path, options);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->RecordBenchCells(run, {Cell(kConfigA, "best", 1)}).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE((*reader)->ListBenchCells(run)->empty());
}

// ---- a file written by a binary with schema version 2

TEST(StoreUpgrade, VersionTwoFileMigratesKeepingItsRows) {
  ScopedTempDir dir;
  const std::string path = dir.File("v2.db");
  ASSERT_EQ(db_test::WriteSchemaVersion(path, 2), absl::OkStatus());  // what the version-2 binary created
  ASSERT_EQ(RawQuery(path, "PRAGMA user_version"), "2");
  RawQuery(path,
           "INSERT INTO runs (commit_hash, host, device_class, device_json, backend, tool_version, "
           "environment, label, started_unix_ms) VALUES ('old', 'h', 'cpu/Test-CPU/x86_64-avx2', "
           "'{\"backend\":\"cpu\"}', 'cpu', '0.1.0', '', 'sweep', 1700000000000)");
  RawQuery(path, std::string("INSERT INTO regressions (commit_hash, baseline_commit, device_class, problem_key, "
                             "config_key, metric, ratio, p_value, verdict, created_unix_ms) VALUES "
                             "('new', 'old', 'cpu/Test-CPU/x86_64-avx2', '") +
                     kProblem + "', '" + kConfigA + "', 'latency', 1.2, 0.001, 'regressed', 1700000000100)");

  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->SchemaVersion(), Store::LatestSchemaVersion());
  absl::StatusOr<RunInfo> run = store->GetRun(1);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->commit, "old");
  ASSERT_EQ(store->ListRegressions()->size(), 1u);
  EXPECT_EQ(store->ListRegressions()->front().verdict, "regressed");
  // The new table works on the upgraded file.
  ASSERT_TRUE(store->RecordBenchCells(1, {Cell(kConfigA, "best", 3)}).ok());
  EXPECT_EQ(store->ListBenchCells(1)->size(), 1u);
  EXPECT_EQ(RawQuery(path, "UPDATE bench_cells SET outcome = 'bogus'"), "<error>");
}

// ---- a file written by a binary with schema version 4: commits as they were sent or typed

TEST(StoreUpgrade, VersionFourCommitsAreRewrittenInCanonicalForm) {
  ScopedTempDir dir;
  const std::string path = dir.File("v4.db");
  ASSERT_EQ(db_test::WriteSchemaVersion(path, 4), absl::OkStatus());  // what the version-4 binary created
  ASSERT_EQ(RawQuery(path, "PRAGMA user_version"), "4");
  const std::string run = "INSERT INTO runs (commit_hash, host, device_class, device_json, backend, tool_version, "
                          "environment, label, started_unix_ms) VALUES ('";
  const std::string rest = "', 'h', 'cpu/Test-CPU/x86_64-avx2', '{\"backend\":\"cpu\"}', 'cpu', '0.1.0', '', "
                           "'sweep', 1700000000000)";
  RawQuery(path, run + "0DDB43A4D977C3B1E0F2A9D8C7B6A5F4E3D2C1B0" + rest);  // a client's full upper-case hash
  RawQuery(path, run + "local-dirty" + rest);                               // a label
  const std::string regression = "INSERT INTO regressions (commit_hash, baseline_commit, device_class, problem_key, "
                                 "config_key, metric, ratio, p_value, verdict, created_unix_ms) VALUES ('";
  const std::string verdict = std::string("', 'cpu/Test-CPU/x86_64-avx2', '") + kProblem + "', '" + kConfigA +
                              "', 'latency', 1.0, 0.5, 'same', 1700000000100)";
  // An A/A run of regress named by 7 digits: the build's commit against the flag as typed.
  RawQuery(path, regression + "0ddb43a4d977', '0ddb43a" + verdict);
  // An abbreviation that no row spells out stays as it was.
  RawQuery(path, regression + "0ddb43a4d977', 'fedcba9" + verdict);

  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->SchemaVersion(), Store::LatestSchemaVersion());
  EXPECT_EQ(store->GetRun(1)->commit, "0ddb43a4d977");
  EXPECT_EQ(store->GetRun(2)->commit, "local-dirty");
  absl::StatusOr<std::vector<Regression>> rows = store->ListRegressions();
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[1].commit, "0ddb43a4d977");
  EXPECT_EQ((*rows)[1].baseline_commit, "0ddb43a4d977");  // now an A/A row, found by equality
  EXPECT_EQ((*rows)[0].baseline_commit, "fedcba9");
}

}  // namespace
}  // namespace fusetune
