// The change_points table: a cell's change points round-trip, a new detection replaces the
// cell's rows and no other cell's, bad rows write nothing, and filters select.
#include <cmath>
#include <string>
#include <vector>

#include "fusetune/db/store.h"
#include "gtest/gtest.h"
#include "test_util.h"
#include "testing/store_backends.h"

namespace fusetune {
namespace {

using db_test::OpenOrDie;
using db_test::RawQuery;
using db_test::ScopedTempDir;

// Every TEST_P below runs on SQLite and on PostgreSQL (testing/store_backends.h).
class ChangePointsStore : public db_test::StoreBackendTest {};
FUSETUNE_STORE_BACKENDS(ChangePointsStore);

constexpr char kDevice[] = "cpu/Test-CPU/x86_64-avx2";
constexpr char kSuite[] = "cpu-nightly";
constexpr char kProblem[] = "prefill/b1/hq12/hkv12/q128/k128/d64/causal0/fp32";
constexpr char kConfig[] = "fused/bm64/bs32/w2/fp32/st1";
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

ChangePointRow Row(const std::string& commit, int64_t position, double before, double after) {
  ChangePointRow r;
  r.commit = commit;
  r.position = position;
  r.mean_before_us = before;
  r.mean_after_us = after;
  r.ratio = after / before;
  r.p_value = 1e-5;
  r.direction = after > before ? "slower" : "faster";
  r.detected_unix_ms = 1700000000000;
  return r;
}

TEST_P(ChangePointsStore, RoundTripsACellsRowsInPositionOrder) {
  auto store = OpenOrDie(Location());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->ReplaceChangePoints(kDevice, kSuite, kProblem, kConfig,
                                         {Row("c30", 30, 10, 10.3), Row("c12", 12, 10.4, 10)})
                  .ok());
  auto rows = store->ListChangePoints({});
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  const ChangePointRow& first = (*rows)[0];
  EXPECT_EQ(first.position, 12);
  EXPECT_EQ(first.commit, "c12");
  EXPECT_EQ(first.device_class, kDevice);
  EXPECT_EQ(first.suite, kSuite);
  EXPECT_EQ(first.problem_key, kProblem);
  EXPECT_EQ(first.config_key, kConfig);
  EXPECT_DOUBLE_EQ(first.mean_before_us, 10.4);
  EXPECT_DOUBLE_EQ(first.mean_after_us, 10);
  EXPECT_DOUBLE_EQ(first.ratio, 10 / 10.4);
  EXPECT_DOUBLE_EQ(first.p_value, 1e-5);
  EXPECT_EQ(first.direction, "faster");
  EXPECT_EQ(first.detected_unix_ms, 1700000000000);
  EXPECT_EQ((*rows)[1].position, 30);
  EXPECT_EQ((*rows)[1].direction, "slower");
}

TEST_P(ChangePointsStore, ReplacingACellLeavesOtherCellsAlone) {
  auto store = OpenOrDie(Location());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->ReplaceChangePoints(kDevice, kSuite, kProblem, kConfig, {Row("a", 5, 10, 11)}).ok());
  ASSERT_TRUE(store->ReplaceChangePoints(kDevice, kSuite, kProblem, "other", {Row("b", 7, 10, 11)}).ok());
  ASSERT_TRUE(store->ReplaceChangePoints(kDevice, kSuite, kProblem, kConfig, {Row("c", 9, 10, 12)}).ok());
  auto cell = store->ListChangePoints({.config_key = kConfig});
  ASSERT_TRUE(cell.ok());
  ASSERT_EQ(cell->size(), 1u);
  EXPECT_EQ(cell->front().commit, "c");
  EXPECT_EQ(store->ListChangePoints({.config_key = "other"})->size(), 1u);
  EXPECT_EQ(store->ListChangePoints({.commit = "b"})->size(), 1u);
  EXPECT_EQ(store->ListChangePoints({.suite = "elsewhere"})->size(), 0u);
  EXPECT_EQ(store->ListChangePoints({.device_class = kDevice})->size(), 2u);
  EXPECT_EQ(store->ListChangePoints({}, 1)->size(), 1u);
  // An empty detection clears the cell.
  ASSERT_TRUE(store->ReplaceChangePoints(kDevice, kSuite, kProblem, kConfig, {}).ok());
  EXPECT_EQ(store->ListChangePoints({.config_key = kConfig})->size(), 0u);
}

TEST_P(ChangePointsStore, BadRowsWriteNothing) {
  auto store = OpenOrDie(Location());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->ReplaceChangePoints(kDevice, kSuite, kProblem, kConfig, {Row("a", 5, 10, 11)}).ok());
  const ChangePointRow good = Row("b", 8, 10, 11);
  std::vector<ChangePointRow> bad(9, good);
  bad[0].commit = "";
  bad[1].position = -1;
  bad[2].mean_before_us = 0;
  bad[3].mean_after_us = std::nan("");
  bad[4].ratio = -1;
  bad[5].p_value = 1.5;
  bad[6].direction = "sideways";
  bad[7].detected_unix_ms = -5;
  bad[8].suite = "another-suite";
  for (size_t i = 0; i < bad.size(); ++i) {
    EXPECT_EQ(store->ReplaceChangePoints(kDevice, kSuite, kProblem, kConfig, {good, bad[i]}).code(), kInvalid)
        << "row " << i;
  }
  EXPECT_EQ(store->ReplaceChangePoints(kDevice, kSuite, kProblem, kConfig, {good, good}).code(), kInvalid);
  EXPECT_EQ(store->ReplaceChangePoints("", kSuite, kProblem, kConfig, {good}).code(), kInvalid);
  EXPECT_EQ(store->ReplaceChangePoints(kDevice, kSuite, kProblem, "", {good}).code(), kInvalid);
  EXPECT_EQ(store->ListChangePoints({}, 0).status().code(), kInvalid);
  auto rows = store->ListChangePoints({});
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ(rows->front().commit, "a");
}

TEST(ChangePointsStoreSqlite, TheTableChecksDirectionAndPValue) {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/f.db";
  {
    auto store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->ReplaceChangePoints(kDevice, kSuite, kProblem, kConfig, {Row("a", 5, 10, 11)}).ok());
  }
  EXPECT_EQ(RawQuery(path, "UPDATE change_points SET direction = 'up'"), "<error>");
  EXPECT_EQ(RawQuery(path, "UPDATE change_points SET p_value = 2"), "<error>");
  EXPECT_EQ(RawQuery(path, "SELECT count(*) FROM change_points"), "1");
}

}  // namespace
}  // namespace fusetune
