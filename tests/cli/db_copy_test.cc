// `fusetune db copy` and the PostgreSQL --db forms, through the built binary against a real,
// throw-away PostgreSQL server (db/src/testing/postgres_cluster.h; skipped without one):
// every table copied with its ids, a second copy copying nothing, a conflicting target left
// untouched, an unreachable database and a read-only role failing clearly with exit 1, and no
// password in any output.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/subprocess.h"
#include "fusetune/db/store.h"
#include "gtest/gtest.h"
#include "testing/postgres_cluster.h"

namespace fusetune {
namespace {

using db_test::PostgresTestCluster;
using testing::CommandResult;
using testing::RunCommand;
using testing::TempDir;

CommandResult Fusetune(std::vector<std::string> args) {
  args.insert(args.begin(), FUSETUNE_BINARY);
  return RunCommand(args, 300);
}

constexpr char kProblem[] = "prefill/b1/hq12/hkv12/q128/k128/d64/causal0/fp32";
constexpr char kConfig[] = "fused/bm64/bs64/t2/fp32/st1";
constexpr char kCommit[] = "0123456789ab";

DeviceInfo TestDevice() {
  DeviceInfo d;
  d.backend = "cpu";
  d.name = "Test CPU";
  d.arch = "x86_64";
  return d;
}

// An SQLite store with a row in every table the copy moves that the tests look at.
void FillSqlite(const std::string& path) {
  auto opened = Store::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Store& store = **opened;
  RunInfo run;
  run.commit = kCommit;
  run.host = "host";
  run.device = TestDevice();
  run.label = "sweep";
  run.started_unix_ms = 1700000000000;
  const int64_t run_id = *store.BeginRun(run);
  for (int attempt = 0; attempt < 3; ++attempt) {
    Trial t;
    t.run_id = run_id;
    t.problem_key = kProblem;
    t.config_key = kConfig;
    t.attempt = attempt;
    t.trial_id = TrialId(run_id, kProblem, kConfig, attempt);
    t.outcome = TrialOutcome::kOk;
    t.samples_us = {10.25, 11.5};
    t.median_us = 10.25 + attempt;
    t.created_unix_ms = 1700000000100 + attempt;
    ASSERT_TRUE(store.RecordTrial(t).ok());
  }
  BestConfig best;
  best.device_class = run.device.DeviceClass();
  best.problem_key = kProblem;
  best.config_key = kConfig;
  best.median_us = 10.25;
  best.run_id = run_id;
  best.commit = kCommit;
  ASSERT_TRUE(store.UpsertBestConfig(best).ok());
  Regression r;
  r.commit = kCommit;
  r.baseline_commit = "ba5e00000000";
  r.device_class = best.device_class;
  r.problem_key = kProblem;
  r.config_key = kConfig;
  r.metric = "latency";
  r.ratio = 1.5;
  r.p_value = 0.001;
  r.verdict = "regressed";
  ASSERT_TRUE(store.RecordRegression(r).ok());
  Job job;
  job.device_class = best.device_class;
  job.commit = kCommit;
  job.problem_keys = {kProblem};
  job.spec_json = "{}";
  ASSERT_TRUE(store.EnqueueJob(job).ok());
  ASSERT_TRUE(store.FinishRun(run_id).ok());
}

class DbCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<PostgresTestCluster*> cluster = PostgresTestCluster::Shared();
    if (!cluster.ok()) GTEST_SKIP() << "PostgreSQL tests skipped: " << cluster.status().message();
    cluster_ = *cluster;
    absl::StatusOr<std::string> schema = cluster_->CreateSchema();
    ASSERT_TRUE(schema.ok()) << schema.status();
    schema_ = *schema;
    url_ = cluster_->Url(PostgresTestCluster::kDatabase, "postgres", "", schema_);
    sqlite_ = dir_.File("local.db");
    FillSqlite(sqlite_);
  }
  PostgresTestCluster* cluster_ = nullptr;
  TempDir dir_;
  std::string schema_;
  std::string url_;
  std::string sqlite_;
};

TEST_F(DbCopyTest, CopiesEveryRowWithItsIdsAndASecondCopyCopiesNothing) {
  CommandResult first = Fusetune({"db", "copy", "--from", sqlite_, "--to", url_});
  ASSERT_EQ(first.exit_code, 0) << first.err << first.out;
  EXPECT_NE(first.out.find("| runs | 1 | 1 | 0 | 1 |"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("| trials | 3 | 3 | 0 | 3 |"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("| jobs | 1 | 1 | 0 | 1 |"), std::string::npos) << first.out;

  {
    auto pg = Store::Open(url_);
    ASSERT_TRUE(pg.ok()) << pg.status();
    absl::StatusOr<RunInfo> run = (*pg)->GetRun(1);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->commit, kCommit);
    EXPECT_GT(run->finished_unix_ms, 0);
    absl::StatusOr<std::vector<Trial>> trials = (*pg)->ListTrials(1);
    ASSERT_TRUE(trials.ok()) << trials.status();
    ASSERT_EQ(trials->size(), 3u);
    EXPECT_EQ((*trials)[2].median_us, 12.25);
    EXPECT_EQ((*trials)[0].samples_us, (std::vector<double>{10.25, 11.5}));
    EXPECT_EQ((*pg)->GetBestConfig(run->device.DeviceClass(), kProblem)->config_key, kConfig);
    EXPECT_EQ((*pg)->ListRegressions()->size(), 1u);
    // The copied ids are taken: what the server adds next gets new ones.
    absl::StatusOr<int64_t> next = (*pg)->BeginRun(*run);
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(*next, 2);
  }

  CommandResult second = Fusetune({"db", "copy", "--from", sqlite_, "--to", url_});
  ASSERT_EQ(second.exit_code, 0) << second.err << second.out;
  EXPECT_NE(second.out.find("| trials | 3 | 0 | 3 | 3 |"), std::string::npos) << second.out;
  EXPECT_NE(second.out.find("\n0 rows copied"), std::string::npos) << second.out;

  // The copy is what readers see: report over the URL.
  CommandResult report = Fusetune({"report", "--db", url_});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find(kConfig), std::string::npos) << report.out;
}

TEST_F(DbCopyTest, ATargetHoldingOtherRowsUnderTheSameIdsStopsTheCopyAndGetsNothing) {
  {
    auto pg = Store::Open(url_);
    ASSERT_TRUE(pg.ok()) << pg.status();
    RunInfo other;
    other.commit = "fedcba987654";
    other.host = "elsewhere";
    other.label = "sweep";
    ASSERT_EQ(*(*pg)->BeginRun(other), 1);
  }
  CommandResult r = Fusetune({"db", "copy", "--from", sqlite_, "--to", url_});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.err.find("conflicts with a different row"), std::string::npos) << r.err;
  auto pg = Store::Open(url_);
  ASSERT_TRUE(pg.ok()) << pg.status();
  EXPECT_EQ(*(*pg)->CountTrials(1), 0);  // one transaction: nothing half-copied
  EXPECT_TRUE((*pg)->ListBestConfigs()->empty());
}

TEST_F(DbCopyTest, AnUnreachableDatabaseExitsOneAndNoMessageHoldsThePassword) {
  const std::string secret = "Sup3r-Secret-pw";
  const std::string unreachable = absl::StrCat("postgresql://alice:", secret, "@/nowhere?host=/nonexistent-dir");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"report", "--db", unreachable},
        std::vector<std::string>{"best", "--db", unreachable, "--seq", "128", "--heads", "12", "--head-dim", "64"},
        std::vector<std::string>{"db", "copy", "--from", sqlite_, "--to", unreachable}}) {
    CommandResult r = Fusetune(args);
    EXPECT_EQ(r.exit_code, 1) << args[0] << ": " << r.err << r.out;
    EXPECT_NE(r.err.find("cannot reach database postgresql://alice:***@/nowhere"), std::string::npos)
        << args[0] << ": " << r.err;
    EXPECT_EQ(r.err.find(secret), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find(secret), std::string::npos) << r.out;
  }
}

TEST_F(DbCopyTest, AWrongPasswordIsRefusedWithoutPrintingIt) {
  const std::string wrong = "Wr0ng-Pa55-for-cli";
  const std::string url = cluster_->Url(PostgresTestCluster::kDatabase, PostgresTestCluster::kPasswordRole, wrong,
                                        schema_);
  CommandResult r = Fusetune({"report", "--db", url});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.err.find("refused the login"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(wrong), std::string::npos) << r.err;
}

TEST_F(DbCopyTest, AReadOnlyRoleReadsButCannotWrite) {
  ASSERT_EQ(Fusetune({"db", "copy", "--from", sqlite_, "--to", url_}).exit_code, 0);
  const std::string reader = absl::StrCat("cli_reader_", schema_);
  ASSERT_TRUE(cluster_
                  ->RunSql(PostgresTestCluster::kDatabase,
                           absl::StrCat("CREATE ROLE ", reader, " LOGIN; GRANT USAGE ON SCHEMA ", schema_, " TO ",
                                        reader, "; GRANT SELECT ON ALL TABLES IN SCHEMA ", schema_, " TO ", reader))
                  .ok());
  const std::string url = cluster_->Url(PostgresTestCluster::kDatabase, reader, "", schema_);
  CommandResult report = Fusetune({"report", "--db", url});
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find(kConfig), std::string::npos) << report.out;
  CommandResult best = Fusetune({"best", "--db", url, "--seq", "128", "--heads", "12", "--head-dim", "64",
                                 "--device-class", TestDevice().DeviceClass()});
  EXPECT_EQ(best.exit_code, 0) << best.err << best.out;

  // Writing through the role: the copy (into the same schema) fails clearly.
  CommandResult write = Fusetune({"db", "copy", "--from", sqlite_, "--to", url});
  EXPECT_EQ(write.exit_code, 1) << write.out;
  EXPECT_NE(write.err.find("may not"), std::string::npos) << write.err;
}

}  // namespace
}  // namespace fusetune
