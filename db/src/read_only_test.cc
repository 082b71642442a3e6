// StoreAccess::kReadOnly: reading a database that this process cannot write (a read-only
// mount, another user's directory), through a live writer's WAL, and never creating,
// migrating or changing a file.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "common/read_only_dir.h"
#include "fusetune/db/store.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace fusetune {
namespace {

using db_test::RawQuery;
using db_test::ScopedTempDir;
using db_test::TestRun;
using db_test::TestTrial;
using testing::ReadOnlyView;

constexpr char kProblemA[] = "prefill/b1/hq12/hkv12/q128/k128/d64/causal0/fp32";
constexpr char kProblemB[] = "prefill/b1/hq12/hkv12/q256/k256/d64/causal0/fp32";
constexpr char kConfig[] = "fused/bm64/bs32/w2/fp32/st1";

absl::StatusOr<std::unique_ptr<Store>> OpenReadOnly(const std::string& path) {
  StoreOptions options;
  options.access = StoreAccess::kReadOnly;
  return Store::Open(path, options);
}

BestConfig Best(int64_t run, const std::string& problem, double median) {
  BestConfig b;
  b.device_class = db_test::TestDevice().DeviceClass();
  b.problem_key = problem;
  b.config_key = kConfig;
  b.median_us = median;
  b.p10_us = median * 0.9;
  b.p90_us = median * 1.1;
  b.speedup_vs_materialized = 2.5;
  b.speedup_vs_partial = 1.25;
  b.run_id = run;
  b.commit = "abc123";
  b.updated_unix_ms = 1700000001000;
  return b;
}

// A database with one run, two trials and two best configs, closed (so no WAL is left).
void WriteSmallDatabase(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  const int64_t run = *(*store)->BeginRun(TestRun());
  ASSERT_TRUE((*store)->RecordTrials({TestTrial(run, kProblemA, kConfig), TestTrial(run, kProblemB, kConfig)}).ok());
  ASSERT_TRUE((*store)->UpsertBestConfig(Best(run, kProblemA, 100)).ok());
  ASSERT_TRUE((*store)->UpsertBestConfig(Best(run, kProblemB, 200)).ok());
}

// What a reader sees, as text, for comparing two opens.
std::string Contents(Store& store) {
  std::string out;
  absl::StatusOr<std::vector<BestConfig>> best = store.ListBestConfigs();
  if (!best.ok()) return std::string(best.status().message());
  for (const BestConfig& b : *best) out += b.problem_key + " " + b.config_key + " " + std::to_string(b.median_us) + "\n";
  absl::StatusOr<std::vector<Trial>> trials = store.ListTrials(1);
  if (!trials.ok()) return std::string(trials.status().message());
  for (const Trial& t : *trials) out += t.trial_id + "\n";
  return out;
}

TEST(ReadOnlyStore, ReadsADatabaseInADirectoryItCannotWriteAsOnAWritableCopy) {
  ScopedTempDir dir;
  const std::string shared = dir.File("shared");
  std::filesystem::create_directory(shared);
  WriteSmallDatabase(shared + "/f.db");
  ASSERT_FALSE(std::filesystem::exists(shared + "/f.db-wal"));
  std::filesystem::copy_file(shared + "/f.db", dir.File("copy.db"));

  ReadOnlyView view(shared);
  if (!view.ok()) GTEST_SKIP() << "cannot make a read-only directory: " << view.unavailable_reason();
  const std::string path = view.path() + "/f.db";

  absl::StatusOr<std::unique_ptr<Store>> reader = OpenReadOnly(path);
  ASSERT_TRUE(reader.ok()) << view.mechanism() << ": " << reader.status();
  absl::StatusOr<std::unique_ptr<Store>> copy = OpenReadOnly(dir.File("copy.db"));
  ASSERT_TRUE(copy.ok()) << copy.status();
  const std::string expected = Contents(**copy);
  EXPECT_NE(expected.find(kProblemB), std::string::npos) << expected;
  EXPECT_EQ(Contents(**reader), expected);
  absl::StatusOr<BestConfig> best = (*reader)->GetBestConfig(db_test::TestDevice().DeviceClass(), kProblemA);
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->median_us, 100);
  EXPECT_EQ(*(*reader)->SchemaVersion(), Store::LatestSchemaVersion());
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(path + "-shm"));

  // A writer cannot work there; it says so, naming the file.
  absl::StatusOr<std::unique_ptr<Store>> writer = Store::Open(path);
  ASSERT_FALSE(writer.ok());
  const std::string message(writer.status().message());
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_EQ(message.find("PRAGMA"), std::string::npos) << message;
}

// A writer is still using the file (its -wal and -shm exist, with commits not yet folded
// into the file): the reader must see those commits, which an immutable open would miss.
TEST(ReadOnlyStore, SeesTheCommitsOfALiveWriterStillInItsWal) {
  ScopedTempDir dir;
  const std::string shared = dir.File("shared");
  std::filesystem::create_directory(shared);
  WriteSmallDatabase(shared + "/f.db");
  absl::StatusOr<std::unique_ptr<Store>> writer = Store::Open(shared + "/f.db");
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->UpsertBestConfig(Best(1, kProblemA, 42)).ok());
  ASSERT_GT(std::filesystem::file_size(shared + "/f.db-wal"), 0u);

  ReadOnlyView view(shared);
  if (!view.ok()) GTEST_SKIP() << "cannot make a read-only directory: " << view.unavailable_reason();
  absl::StatusOr<std::unique_ptr<Store>> reader = OpenReadOnly(view.path() + "/f.db");
  ASSERT_TRUE(reader.ok()) << view.mechanism() << ": " << reader.status();
  const std::string device_class = db_test::TestDevice().DeviceClass();
  absl::StatusOr<BestConfig> best = (*reader)->GetBestConfig(device_class, kProblemA);
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->median_us, 42);
  // And a commit made while the reader is open.
  ASSERT_TRUE((*writer)->UpsertBestConfig(Best(1, kProblemA, 41)).ok());
  best = (*reader)->GetBestConfig(device_class, kProblemA);
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->median_us, 41);
}

// The writer is gone but left commits in -wal, and SQLite cannot create -shm to read them:
// refused, saying what to do, rather than answering from the stale file.
TEST(ReadOnlyStore, RefusesPendingWalContentItCannotReadAndSaysWhatToDo) {
  ScopedTempDir dir;
  const std::string live = dir.File("live");
  const std::string shared = dir.File("shared");
  std::filesystem::create_directory(live);
  std::filesystem::create_directory(shared);
  WriteSmallDatabase(live + "/f.db");
  {
    absl::StatusOr<std::unique_ptr<Store>> writer = Store::Open(live + "/f.db");
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->UpsertBestConfig(Best(1, kProblemA, 42)).ok());
    // A crashed writer's files: the database and its WAL, no -shm.
    std::filesystem::copy_file(live + "/f.db", shared + "/f.db");
    std::filesystem::copy_file(live + "/f.db-wal", shared + "/f.db-wal");
  }
  ASSERT_GT(std::filesystem::file_size(shared + "/f.db-wal"), 0u);

  {
    ReadOnlyView view(shared);
    if (!view.ok()) GTEST_SKIP() << "cannot make a read-only directory: " << view.unavailable_reason();
    const std::string path = view.path() + "/f.db";
    absl::StatusOr<std::unique_ptr<Store>> reader = OpenReadOnly(path);
    ASSERT_FALSE(reader.ok()) << view.mechanism() << ": an open that ignores " << path << "-wal";
    EXPECT_EQ(reader.status().code(), absl::StatusCode::kFailedPrecondition) << reader.status();
    const std::string message(reader.status().message());
    EXPECT_NE(message.find(path + "-wal"), std::string::npos) << message;
    EXPECT_NE(message.find("wal_checkpoint"), std::string::npos) << message;
    EXPECT_FALSE(std::filesystem::exists(path + "-shm"));
  }
  // Doing what the message says (here: the owner checkpoints) makes it readable.
  EXPECT_EQ(RawQuery(shared + "/f.db", "PRAGMA wal_checkpoint(TRUNCATE)"), "0");
  ReadOnlyView view(shared);
  ASSERT_TRUE(view.ok());
  absl::StatusOr<std::unique_ptr<Store>> reader = OpenReadOnly(view.path() + "/f.db");
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<BestConfig> best = (*reader)->GetBestConfig(db_test::TestDevice().DeviceClass(), kProblemA);
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->median_us, 42);
}

TEST(ReadOnlyStore, AMissingFileIsNotFoundAndIsNotCreated) {
  ScopedTempDir dir;
  const std::string path = dir.File("missing.db");
  absl::StatusOr<std::unique_ptr<Store>> reader = OpenReadOnly(path);
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kNotFound) << reader.status();
  EXPECT_NE(std::string(reader.status().message()).find("no database at " + path), std::string::npos)
      << reader.status();
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
}

// A reader never migrates: files without this binary's schema are refused and left as they were.
TEST(ReadOnlyStore, NeverMigratesOrChangesAFile) {
  ScopedTempDir dir;
  const std::string empty = dir.File("empty.db");
  std::ofstream{empty};
  absl::StatusOr<std::unique_ptr<Store>> reader = OpenReadOnly(empty);
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kFailedPrecondition) << reader.status();
  EXPECT_NE(std::string(reader.status().message()).find("not a fusetune database"), std::string::npos)
      << reader.status();
  EXPECT_EQ(std::filesystem::file_size(empty), 0u);

  const std::string newer = dir.File("newer.db");
  WriteSmallDatabase(newer);
  RawQuery(newer, "PRAGMA user_version = 99");
  reader = OpenReadOnly(newer);
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kFailedPrecondition) << reader.status();
  EXPECT_NE(std::string(reader.status().message()).find("newer than this binary"), std::string::npos)
      << reader.status();
  EXPECT_EQ(RawQuery(newer, "PRAGMA user_version"), "99");
}

TEST(ReadOnlyStore, WritesAreRefusedNamingTheFile) {
  ScopedTempDir dir;
  const std::string path = dir.File("f.db");
  WriteSmallDatabase(path);
  absl::StatusOr<std::unique_ptr<Store>> reader = OpenReadOnly(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::Status st = (*reader)->UpsertBestConfig(Best(1, kProblemA, 1));
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
  EXPECT_NE(std::string(st.message()).find(path), std::string::npos) << st;
  EXPECT_NE(std::string(st.message()).find("read-only"), std::string::npos) << st;
  EXPECT_EQ(RawQuery(path, "SELECT median_us FROM best_configs WHERE problem_key = '" + std::string(kProblemA) + "'"),
            "100.0");
}

}  // namespace
}  // namespace fusetune
