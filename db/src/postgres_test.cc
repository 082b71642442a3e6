// The PostgreSQL store's own behaviour: URLs and their redaction, the parameter rewrite,
// the schema version, and the errors of opening (unreachable server, refused login, missing
// database, a read-only role). What both stores share is tested once, over both, by the
// StoreBackendTest suites.
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fusetune/db/store.h"
#include "gtest/gtest.h"
#include "postgres.h"
#include "test_util.h"
#include "testing/postgres_cluster.h"

namespace fusetune {
namespace {

using db_test::PostgresTestCluster;
using db_test::TestRun;

TEST(PostgresUrl, BothSchemesInAnyCaseArePostgresAndEverythingElseIsAFile) {
  EXPECT_TRUE(IsPostgresUrl("postgresql://u@h/db"));
  EXPECT_TRUE(IsPostgresUrl("postgres://u@h/db"));
  EXPECT_TRUE(IsPostgresUrl("PostgreSQL://u@h/db"));
  EXPECT_FALSE(IsPostgresUrl("./fusetune.db"));
  EXPECT_FALSE(IsPostgresUrl("postgresql.db"));
  EXPECT_FALSE(IsPostgresUrl(":memory:"));
}

TEST(PostgresUrl, RedactionHidesThePasswordAndKeepsTheRest) {
  EXPECT_EQ(RedactDatabaseUrl("postgresql://alice:hunter2@db.example:5432/tune?sslmode=require"),
            "postgresql://alice:***@db.example:5432/tune?sslmode=require");
  EXPECT_EQ(RedactDatabaseUrl("postgres://alice@db/tune"), "postgres://alice@db/tune");
  EXPECT_EQ(RedactDatabaseUrl("postgresql:///tune?user=bob&password=hunter2&host=/tmp"),
            "postgresql:///tune?user=bob&password=***&host=/tmp");
  EXPECT_EQ(RedactDatabaseUrl("postgresql://a:p%40ss@h/d"), "postgresql://a:***@h/d");
  EXPECT_EQ(RedactDatabaseUrl("./with:colon@sign.db"), "./with:colon@sign.db");  // a file: unchanged
}

TEST(PostgresSql, QuestionMarkParametersBecomeDollarParametersOutsideQuotes) {
  EXPECT_EQ(db_internal::ToPostgresParameters("SELECT a FROM t WHERE b = ?1 AND c = ?12 AND d = '?3'"),
            "SELECT a FROM t WHERE b = $1 AND c = $12 AND d = '?3'");
}

TEST(PostgresSql, TextKeepsValidUtf8AndReplacesNulAndInvalidBytes) {
  EXPECT_EQ(db_internal::ToPostgresText("plain 'quoted' \xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"),
            "plain 'quoted' \xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
  EXPECT_EQ(db_internal::ToPostgresText(std::string("a\0b", 3)), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(db_internal::ToPostgresText("\xFF\xC3"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(db_internal::ToPostgresText("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong '/'
  EXPECT_EQ(db_internal::ToPostgresText("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
}

// A test with a fresh database of the binary's cluster; skipped without one.
class PostgresStore : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<PostgresTestCluster*> cluster = PostgresTestCluster::Shared();
    if (!cluster.ok()) GTEST_SKIP() << "PostgreSQL tests skipped: " << cluster.status().message();
    cluster_ = *cluster;
    absl::StatusOr<std::string> schema = cluster_->CreateSchema();
    ASSERT_TRUE(schema.ok()) << schema.status();
    schema_ = *schema;
    url_ = cluster_->Url(database_, "postgres", "", schema_);
  }
  PostgresTestCluster* cluster_ = nullptr;
  const std::string database_ = PostgresTestCluster::kDatabase;
  std::string schema_;
  std::string url_;
};

TEST_F(PostgresStore, CreatesTheSchemaInAnEmptyDatabaseAndKeepsItOnReopen) {
  {
    auto store = db_test::OpenOrDie(url_);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(*store->SchemaVersion(), Store::LatestSchemaVersion());
    ASSERT_TRUE(store->BeginRun(TestRun()).ok());
  }
  auto reopened = db_test::OpenOrDie(url_);
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(*reopened->SchemaVersion(), Store::LatestSchemaVersion());
  EXPECT_TRUE(reopened->GetRun(1).ok());
}

TEST_F(PostgresStore, RefusesASchemaFromANewerBinaryAndChangesNothing) {
  { ASSERT_NE(db_test::OpenOrDie(url_), nullptr); }
  const int future = Store::LatestSchemaVersion() + 1;
  ASSERT_TRUE(cluster_->RunSql(database_, absl::StrCat("UPDATE ", schema_, ".fusetune_schema SET version = ", future)).ok());
  for (StoreAccess access : {StoreAccess::kReadWrite, StoreAccess::kReadOnly}) {
    StoreOptions options;
    options.access = access;
    absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(url_, options);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
    EXPECT_TRUE(absl::StrContains(s.status().message(), "newer than this binary")) << s.status();
  }
}

TEST_F(PostgresStore, ReadOnlyOpenOfAnEmptyDatabaseIsRefusedAndCreatesNothing) {
  StoreOptions options;
  options.access = StoreAccess::kReadOnly;
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(url_, options);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  auto store = db_test::OpenOrDie(url_);  // still empty: the writer creates version 1 onwards
  ASSERT_NE(store, nullptr);
}

TEST_F(PostgresStore, UnreachableServerIsUnavailableNamingTheDatabase) {
  const std::string url = "postgresql://postgres@/nowhere?host=/nonexistent-socket-dir";
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(url);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable) << s.status();
  EXPECT_TRUE(absl::StrContains(s.status().message(), "cannot reach database " + url)) << s.status();
}

TEST_F(PostgresStore, MissingDatabaseIsNotFound) {
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(cluster_->Url("no_such_database"));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound) << s.status();
}

TEST_F(PostgresStore, WrongPasswordIsPermissionDeniedAndTheMessageNeverHoldsIt) {
  const std::string wrong = "Wr0ng-Pa55word-4711";
  const std::string url = cluster_->Url(database_, PostgresTestCluster::kPasswordRole, wrong, schema_);
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(url);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kPermissionDenied) << s.status();
  EXPECT_FALSE(absl::StrContains(s.status().message(), wrong)) << s.status();
  EXPECT_TRUE(absl::StrContains(s.status().message(), "password")) << s.status();
}

TEST_F(PostgresStore, ALostIdleConnectionIsReestablishedWithItsSettings) {
  const std::string url = url_ + "&application_name=reconnect_" + schema_;
  StoreOptions read_only;
  read_only.access = StoreAccess::kReadOnly;
  { ASSERT_NE(db_test::OpenOrDie(url), nullptr); }  // creates the schema
  auto writer = db_test::OpenOrDie(url);
  ASSERT_NE(writer, nullptr);
  absl::StatusOr<std::unique_ptr<Store>> reader = Store::Open(url, read_only);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_TRUE(writer->BeginRun(TestRun()).ok());
  // The server ends both connections (as a restart or a cut idle connection would), and waits
  // until they are gone.
  ASSERT_TRUE(cluster_
                  ->RunSql(database_, absl::StrCat("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                                                   "WHERE application_name = 'reconnect_", schema_, "'"))
                  .ok());
  // The next call reconnects: reads and a whole write transaction go through.
  absl::StatusOr<RunInfo> run = writer->GetRun(1);
  EXPECT_TRUE(run.ok()) << run.status();
  absl::StatusOr<int64_t> second = writer->BeginRun(TestRun());
  EXPECT_TRUE(second.ok()) << second.status();
  // So does a read-only store's.
  EXPECT_TRUE((*reader)->GetRun(1).ok());
}

// The server goes away (as in a crash) for a while: every call meanwhile is Unavailable (what
// callers retry), also inside a transaction that was open when it went, and once it is back the
// same store works again without being reopened, nothing committed lost.
TEST_F(PostgresStore, AServerThatIsDownIsUnavailableAndTheStoreWorksAgainOnceItIsBack) {
  auto store = db_test::OpenOrDie(url_);
  ASSERT_NE(store, nullptr);
  absl::StatusOr<int64_t> run = store->BeginRun(TestRun());
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_TRUE(cluster_->StopServer().ok());
  for (int i = 0; i < 3; ++i) {
    const absl::Status st = store->GetRun(*run).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
    EXPECT_EQ(store->BeginRun(TestRun()).status().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(store->ReadSharedStateStamp().status().code(), absl::StatusCode::kUnavailable);
  }
  ASSERT_TRUE(cluster_->StartServer().ok());
  absl::StatusOr<RunInfo> back = store->GetRun(*run);
  EXPECT_TRUE(back.ok()) << back.status();
  absl::StatusOr<int64_t> next = store->BeginRun(TestRun());
  EXPECT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(store->ReadSharedStateStamp().ok());
}

TEST_F(PostgresStore, ReadOnlyRoleReadsButEveryWriteFailsClearly) {
  {
    auto store = db_test::OpenOrDie(url_);
    ASSERT_NE(store, nullptr);
    BestConfig best;
    best.device_class = "cpu/x/y";
    best.problem_key = "prefill/b1/hq12/hkv12/q128/k128/d64/causal0/fp32";
    best.config_key = "fused/bm64/bs64/t2/fp32/st1";
    best.median_us = 12.5;
    ASSERT_TRUE(store->UpsertBestConfig(best).ok());
  }
  const std::string reader = absl::StrCat("reader_", schema_);
  ASSERT_TRUE(cluster_
                  ->RunSql(database_, absl::StrCat("CREATE ROLE ", reader, " LOGIN; GRANT USAGE ON SCHEMA ", schema_,
                                                   " TO ", reader, "; GRANT SELECT ON ALL TABLES IN SCHEMA ", schema_,
                                                   " TO ", reader))
                  .ok());
  const std::string url = cluster_->Url(database_, reader, "", schema_);
  StoreOptions read_only;
  read_only.access = StoreAccess::kReadOnly;
  absl::StatusOr<std::unique_ptr<Store>> r = Store::Open(url, read_only);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<std::vector<BestConfig>> bests = (*r)->ListBestConfigs();
  ASSERT_TRUE(bests.ok()) << bests.status();
  EXPECT_EQ(bests->size(), 1u);

  // A writing open succeeds (nothing to migrate), and then each write is refused by the server.
  absl::StatusOr<std::unique_ptr<Store>> w = Store::Open(url);
  ASSERT_TRUE(w.ok()) << w.status();
  absl::StatusOr<int64_t> run = (*w)->BeginRun(TestRun());
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), absl::StatusCode::kPermissionDenied) << run.status();
  EXPECT_TRUE(absl::StrContains(run.status().message(), "may not")) << run.status();
  EXPECT_EQ((*w)->ListBestConfigs()->front().config_key, bests->front().config_key);
}

}  // namespace
}  // namespace fusetune
