// Database errors name the file and say what is wrong, with no SQL text: a file that is not
// an SQLite database, another program's SQLite file, a damaged file, a lock held past the
// busy timeout, a newer schema.
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "fusetune/db/store.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace fusetune {
namespace {

using db_test::RawQuery;
using db_test::ScopedTempDir;
using db_test::TestRun;
using db_test::TestTrial;

constexpr char kProblem[] = "prefill/b1/hq12/hkv12/q128/k128/d64/causal0/fp32";

// The message names `path`, contains `says`, and carries no SQL of the store's own (a
// suggested command such as sqlite3 PATH 'PRAGMA integrity_check' is advice, not a leak).
void ExpectClearMessage(const absl::Status& st, const std::string& path, const std::string& says) {
  const std::string message(st.message());
  EXPECT_NE(message.find(path), std::string::npos) << "does not name the file: " << message;
  EXPECT_NE(message.find(says), std::string::npos) << "does not say '" << says << "': " << message;
  for (const char* sql : {"SELECT", "INSERT", "UPDATE", "BEGIN", "user_version", "journal_mode", "executing", "preparing"}) {
    EXPECT_EQ(message.find(sql), std::string::npos) << "SQL text in: " << message;
  }
}

absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path, StoreAccess access) {
  StoreOptions options;
  options.access = access;
  return Store::Open(path, options);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(StoreErrors, AFileThatIsNotAnSqliteDatabaseIsNamedAndLeftAsItWas) {
  ScopedTempDir dir;
  const std::string path = dir.File("notes.db");
  const std::string content(4096, 'x');
  std::ofstream(path, std::ios::binary) << content;
  for (StoreAccess access : {StoreAccess::kReadWrite, StoreAccess::kReadOnly}) {
    absl::StatusOr<std::unique_ptr<Store>> store = Open(path, access);
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
    ExpectClearMessage(store.status(), path, "not a fusetune database");
    EXPECT_EQ(ReadAll(path), content);
  }
}

TEST(StoreErrors, AnotherProgramsSqliteFileIsRefusedWithoutAddingTables) {
  ScopedTempDir dir;
  const std::string path = dir.File("other.db");
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &other, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "CREATE TABLE notes (text TEXT)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close_v2(other);
  ASSERT_EQ(RawQuery(path, "SELECT COUNT(*) FROM sqlite_master"), "1");
  for (StoreAccess access : {StoreAccess::kReadWrite, StoreAccess::kReadOnly}) {
    absl::StatusOr<std::unique_ptr<Store>> store = Open(path, access);
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
    ExpectClearMessage(store.status(), path, "not a fusetune database");
  }
  EXPECT_EQ(RawQuery(path, "SELECT COUNT(*) FROM sqlite_master"), "1");
  EXPECT_EQ(RawQuery(path, "PRAGMA journal_mode"), "delete");
}

TEST(StoreErrors, ADamagedFileSaysSoAndHowToCheckIt) {
  ScopedTempDir dir;
  const std::string path = dir.File("f.db");
  {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    const int64_t run = *(*store)->BeginRun(TestRun());
    std::vector<Trial> trials;
    for (int i = 0; i < 200; ++i) trials.push_back(TestTrial(run, kProblem, "fused/c" + std::to_string(i)));
    ASSERT_TRUE((*store)->RecordTrials(trials).ok());
  }
  // Every page after the first (the header and the schema) overwritten.
  const uintmax_t size = std::filesystem::file_size(path);
  ASSERT_GT(size, 8192u);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    const std::string garbage(size - 4096, '\xab');
    f.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  for (StoreAccess access : {StoreAccess::kReadWrite, StoreAccess::kReadOnly}) {
    absl::StatusOr<std::unique_ptr<Store>> store = Open(path, access);
    absl::Status st = store.status();
    if (store.ok()) st = (*store)->ListTrials(1).status();
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
    ExpectClearMessage(st, path, "is damaged");
    ExpectClearMessage(st, path, "integrity_check");
  }
}

TEST(StoreErrors, ALockHeldPastTheBusyTimeoutNamesTheFile) {
  ScopedTempDir dir;
  const std::string path = dir.File("f.db");
  StoreOptions options;
  options.busy_timeout_ms = 50;
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path, options);
  ASSERT_TRUE(store.ok()) << store.status();

  sqlite3* holder = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &holder, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(holder, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  absl::StatusOr<int64_t> run = (*store)->BeginRun(TestRun());
  sqlite3_exec(holder, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close_v2(holder);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), absl::StatusCode::kUnavailable) << run.status();
  ExpectClearMessage(run.status(), path, "locked");
}

TEST(StoreErrors, ASchemaNewerThanTheBinaryNamesTheFile) {
  ScopedTempDir dir;
  const std::string path = dir.File("f.db");
  ASSERT_TRUE(Store::Open(path).ok());
  RawQuery(path, "PRAGMA user_version = 99");
  for (StoreAccess access : {StoreAccess::kReadWrite, StoreAccess::kReadOnly}) {
    absl::StatusOr<std::unique_ptr<Store>> store = Open(path, access);
    EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
    ExpectClearMessage(store.status(), path, "newer than this binary");
  }
  EXPECT_EQ(RawQuery(path, "PRAGMA user_version"), "99");
}

}  // namespace
}  // namespace fusetune
