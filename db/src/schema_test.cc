// The migration machinery with synthetic migration lists: an older file is upgraded by an
// appended migration with its data kept, a failing migration leaves the previous version,
// and a file newer than the list is refused.
#include "schema.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sqlite.h"
#include "test_util.h"

namespace fusetune::db_internal {
namespace {

using db_test::RawQuery;
using db_test::ScopedTempDir;

const Migration kCreate = {1, "create t", "CREATE TABLE t (a INTEGER NOT NULL);"};
const Migration kAddColumn = {2, "add t.b",
                              "ALTER TABLE t ADD COLUMN b INTEGER NOT NULL DEFAULT 7;"};
const Migration kBroken = {3, "broken", "CREATE TABLE u (x); ALTER TABLE no_such_table ADD c;"};

// Applies `migrations` in one write transaction, as Store::Open does.
absl::Status Migrate(const std::string& path, const std::vector<Migration>& migrations) {
  absl::StatusOr<std::unique_ptr<SqliteConnection>> c = SqliteConnection::Open(path, 1000);
  if (!c.ok()) return c.status();
  absl::Status st = (*c)->Exec("BEGIN IMMEDIATE");
  if (st.ok()) st = ApplyMigrations(**c, migrations, path);
  if (st.ok()) return (*c)->Exec("COMMIT");
  if ((*c)->InTransaction()) (void)(*c)->Exec("ROLLBACK");
  return st;
}

TEST(StoreMigrations, AppendedMigrationUpgradesOlderFileAndKeepsData) {
  ScopedTempDir dir;
  const std::string path = dir.File("m.db");
  ASSERT_TRUE(Migrate(path, {kCreate}).ok());
  EXPECT_EQ(RawQuery(path, "PRAGMA user_version"), "1");
  RawQuery(path, "INSERT INTO t (a) VALUES (42)");

  absl::Status st = Migrate(path, {kCreate, kAddColumn});
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(RawQuery(path, "PRAGMA user_version"), "2");
  EXPECT_EQ(RawQuery(path, "SELECT a || ',' || b FROM t"), "42,7");
  // Applying the same list again is a no-op (migration 2 would fail if it ran twice).
  st = Migrate(path, {kCreate, kAddColumn});
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(RawQuery(path, "PRAGMA user_version"), "2");
}

TEST(StoreMigrations, FailedMigrationLeavesThePreviousVersionUntouched) {
  ScopedTempDir dir;
  const std::string path = dir.File("m.db");
  ASSERT_TRUE(Migrate(path, {kCreate, kAddColumn}).ok());
  absl::Status st = Migrate(path, {kCreate, kAddColumn, kBroken});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_NE(std::string(st.message()).find("migration 3"), std::string::npos) << st;
  EXPECT_EQ(RawQuery(path, "PRAGMA user_version"), "2");
  // The first statement of the broken migration was rolled back with the rest.
  EXPECT_EQ(RawQuery(path, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'u'"), "0");
}

TEST(StoreMigrations, FileNewerThanTheListIsRefused) {
  ScopedTempDir dir;
  const std::string path = dir.File("m.db");
  ASSERT_TRUE(Migrate(path, {kCreate, kAddColumn}).ok());
  absl::Status st = Migrate(path, {kCreate});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_EQ(RawQuery(path, "PRAGMA user_version"), "2");
}

}  // namespace
}  // namespace fusetune::db_internal
