// `fusetune history` as a user runs it: a database holding 40 bench runs of a suite (written
// through the Store, one run per commit) with a planted 5 % step in one cell; the step's
// commit reported, the SVG written, the change points recorded, and bad input refused.
#include <sqlite3.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/subprocess.h"
#include "fusetune/db/store.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace fusetune {
namespace {

using testing::CommandResult;
using testing::ReadFile;
using testing::RunCommand;
using testing::TempDir;

constexpr char kSuite[] = "tiny";
constexpr char kProblem[] = "prefill/b1/hq2/hkv2/q64/k64/d32/causal0/fp32";
constexpr char kFused[] = "fused/bm16/bs16/t1/fp32/st1";
constexpr char kMaterialized[] = "materialized/bm16/bs16/t1/fp32/st1";
constexpr int kRuns = 40;
constexpr int kStepAt = 25;  // the first run of the slower build

CommandResult Fusetune(std::vector<std::string> args) {
  args.insert(args.begin(), FUSETUNE_BINARY);
  return RunCommand(args, 120);
}

// A commit as the store holds it: canonical, 12 hex digits.
std::string CommitOf(int i) { return absl::StrFormat("%08x%04d", 0xc0ffee00 + i, i); }

DeviceInfo TestDevice() {
  DeviceInfo d;
  d.backend = "cpu";
  d.name = "Test CPU";
  d.arch = "x86_64-avx2";
  d.sm_count = 2;
  d.driver = "none";
  return d;
}

// Block medians with a seeded lognormal spread of 0.3 %.
BenchCell Cell(const std::string& config, const std::string& role, double median_us, std::mt19937_64& rng) {
  BenchCell c;
  c.suite = kSuite;
  c.problem_key = kProblem;
  c.problem_json = R"({"kind":"prefill","q_lens":[64],"k_lens":[64]})";
  c.config_key = config;
  c.role = role;
  std::normal_distribution<double> normal(0.0, 0.003);
  for (int b = 0; b < 6; ++b) c.blocks.push_back({20, median_us * std::exp(normal(rng)), {}, {}, false});
  return c;
}

// kRuns finished bench runs, one per commit, oldest first; the fused cell 5 % slower from run
// kStepAt on, the materialized cell flat.
void WriteHistory(const std::string& db) {
  auto store = Store::Open(db);
  ASSERT_TRUE(store.ok()) << store.status();
  std::mt19937_64 rng(7);
  for (int i = 0; i < kRuns; ++i) {
    RunInfo info;
    info.commit = CommitOf(i);
    info.host = "testhost";
    info.device = TestDevice();
    info.tool_version = "0.1.0";
    info.label = "bench:tiny";
    info.started_unix_ms = 1700000000000 + i * 60000;
    auto run = (*store)->BeginRun(info);
    ASSERT_TRUE(run.ok()) << run.status();
    ASSERT_TRUE((*store)
                    ->RecordBenchCells(*run, {Cell(kFused, "best", i < kStepAt ? 100.0 : 105.0, rng),
                                              Cell(kMaterialized, "materialized", 300.0, rng)})
                    .ok());
    ASSERT_TRUE((*store)->FinishRun(*run).ok());
  }
}

int64_t Count(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  int64_t n = -1;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(h, sql.c_str(), -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
      n = sqlite3_column_int64(s, 0);
    }
    sqlite3_finalize(s);
  }
  sqlite3_close(h);
  return n;
}

const std::string kCell = std::string(kProblem) + " " + kFused;

TEST(History, ReportsThePlantedStepsCommitAndWritesThePlot) {
  TempDir dir;
  const std::string db = dir.File("f.db");
  WriteHistory(db);
  const std::string svg = dir.File("history.svg");
  CommandResult r = Fusetune({"history", "--db", db, "--suite", kSuite, "--cell", kCell, "--plot", svg});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find(CommitOf(kStepAt) + " "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("<- slower +"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 change point(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("commit " + CommitOf(kStepAt)), std::string::npos) << r.out;
  // A change point says how to bisect it: between the last commit before and its own.
  EXPECT_NE(r.out.find("fusetune bisect --good " + CommitOf(kStepAt - 1) + " --bad " + CommitOf(kStepAt)),
            std::string::npos) << r.out;
  const std::string plot = ReadFile(svg);
  EXPECT_EQ(plot.rfind("<svg", 0), 0u) << plot.substr(0, 80);
  EXPECT_NE(plot.find("<polyline"), std::string::npos);
  EXPECT_NE(plot.find("</svg>"), std::string::npos);
  // The change point is labelled with its commit in full; the x axis with every point's
  // commit (40 fit when rotated), in the 12-character form of the table above.
  EXPECT_NE(plot.find("fill=\"red\">" + CommitOf(kStepAt) + " +"), std::string::npos) << plot;
  int x_labels = 0;
  for (size_t at = plot.find("class=\"x-label\""); at != std::string::npos;
       at = plot.find("class=\"x-label\"", at + 1)) {
    ++x_labels;
  }
  EXPECT_EQ(x_labels, kRuns);
  for (int i = 0; i < kRuns; ++i) {
    EXPECT_NE(plot.find(">" + CommitOf(i).substr(0, 12) + "</text>"), std::string::npos) << i;
  }
  EXPECT_NE(plot.find("class=\"y-tick\""), std::string::npos);
  // The table's columns line up: every row's commit starts under COMMIT.
  const size_t header = r.out.find("COMMIT");
  ASSERT_NE(header, std::string::npos) << r.out;
  const size_t header_line = r.out.rfind('\n', header) + 1;
  for (int i = 0; i < kRuns; ++i) {
    const size_t at = r.out.find(CommitOf(i).substr(0, 12) + " ");
    ASSERT_NE(at, std::string::npos) << i;
    EXPECT_EQ(at - (r.out.rfind('\n', at) + 1), header - header_line) << r.out;
  }
  // Read-only by default: nothing recorded.
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM change_points"), 0);
}

TEST(History, JsonHasTheSeriesAndTheChangePoint) {
  TempDir dir;
  const std::string db = dir.File("f.db");
  WriteHistory(db);
  CommandResult r = Fusetune({"history", "--db", db, "--suite", kSuite, "--cell", kCell, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.at("series").size(), static_cast<size_t>(kRuns));
  EXPECT_EQ(j.at("series")[0].at("commit"), CommitOf(0));
  ASSERT_EQ(j.at("change_points").size(), 1u);
  const nlohmann::json& cp = j.at("change_points")[0];
  EXPECT_EQ(cp.at("commit"), CommitOf(kStepAt));
  EXPECT_EQ(cp.at("index"), kStepAt);
  EXPECT_EQ(cp.at("direction"), "slower");
  EXPECT_NEAR(cp.at("relative_change").get<double>(), 0.05, 0.005);
  EXPECT_LE(cp.at("p_value").get<double>(), 0.001);
}

TEST(History, RecordStoresTheChangePointsReplacingEarlierOnes) {
  TempDir dir;
  const std::string db = dir.File("f.db");
  WriteHistory(db);
  for (int i = 0; i < 2; ++i) {
    CommandResult r = Fusetune({"history", "--db", db, "--suite", kSuite, "--cell", kCell, "--record"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM change_points"), 1);
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM change_points WHERE commit_hash = '" + CommitOf(kStepAt) +
                          "' AND position = 25 AND direction = 'slower' AND suite = 'tiny'"),
            1);
}

TEST(History, AFlatCellHasNoChangePoints) {
  TempDir dir;
  const std::string db = dir.File("f.db");
  WriteHistory(db);
  CommandResult r = Fusetune(
      {"history", "--db", db, "--suite", kSuite, "--cell", std::string(kProblem) + " " + kMaterialized});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("0 change point(s)"), std::string::npos) << r.out;
}

TEST(History, BadInputIsRefused) {
  TempDir dir;
  const std::string db = dir.File("f.db");
  WriteHistory(db);
  CommandResult unknown = Fusetune({"history", "--db", db, "--suite", kSuite, "--cell", "prefill/nope"});
  EXPECT_EQ(unknown.exit_code, 2) << unknown.err;
  EXPECT_NE(unknown.err.find(kCell), std::string::npos) << unknown.err;  // lists what exists
  CommandResult ambiguous = Fusetune({"history", "--db", db, "--suite", kSuite, "--cell", kProblem});
  EXPECT_EQ(ambiguous.exit_code, 2) << ambiguous.err;
  EXPECT_NE(ambiguous.err.find(kMaterialized), std::string::npos) << ambiguous.err;
  CommandResult malformed = Fusetune({"history", "--db", db, "--suite", kSuite, "--cell", kCell + " extra"});
  EXPECT_EQ(malformed.exit_code, 2) << malformed.err;
  CommandResult no_runs = Fusetune({"history", "--db", db, "--suite", "other", "--cell", kCell});
  EXPECT_EQ(no_runs.exit_code, 3) << no_runs.err;
  CommandResult other_device =
      Fusetune({"history", "--db", db, "--suite", kSuite, "--cell", kCell, "--device-class", "cuda/H200/sm90"});
  EXPECT_EQ(other_device.exit_code, 3) << other_device.err;
  // An empty --db is a usage error (exit 2), as for every command that reads a database.
  CommandResult empty_db = Fusetune({"history", "--db", "", "--suite", kSuite, "--cell", kCell});
  EXPECT_EQ(empty_db.exit_code, 2) << empty_db.err;
  EXPECT_NE(empty_db.err.find("--db"), std::string::npos) << empty_db.err;
  CommandResult missing = Fusetune({"history", "--db", dir.File("missing.db"), "--suite", kSuite, "--cell", kCell});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_FALSE(std::filesystem::exists(dir.File("missing.db")));
}

TEST(History, HtmlWritesEveryCellOfTheSuiteOrOne) {
  TempDir dir;
  const std::string db = dir.File("f.db");
  WriteHistory(db);
  const std::string all = dir.File("all.html");
  CommandResult r = Fusetune({"history", "--db", db, "--suite", kSuite, "--html", all, "--html-regress-link",
                              "regress.html"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const std::string page = ReadFile(all);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find(std::string(kFused)), std::string::npos);
  EXPECT_NE(page.find(std::string(kMaterialized)), std::string::npos);  // every cell
  EXPECT_NE(page.find("class=\"change-label\""), std::string::npos);
  EXPECT_NE(page.find("href=\"regress.html#cell-"), std::string::npos);
  // One cell: the table as before, and the page of that cell alone.
  const std::string one = dir.File("one.html");
  r = Fusetune({"history", "--db", db, "--suite", kSuite, "--cell", kCell, "--html", one});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("1 change point(s)"), std::string::npos) << r.out;
  EXPECT_EQ(ReadFile(one).find(std::string(kMaterialized)), std::string::npos);
  // Without --cell only the HTML report makes sense.
  EXPECT_EQ(Fusetune({"history", "--db", db, "--suite", kSuite}).exit_code, 2);
  EXPECT_EQ(Fusetune({"history", "--db", db, "--suite", kSuite, "--html", all, "--json"}).exit_code, 2);
  EXPECT_EQ(Fusetune({"history", "--db", db, "--suite", "other", "--html", all}).exit_code, 3);
}

}  // namespace
}  // namespace fusetune
