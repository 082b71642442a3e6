// The fusetune command line: usage errors exit 2 without side effects, --help works for every
// command, and report --json carries the documented field names.
#include <filesystem>

#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace fusetune {
namespace {

using testing::CommandResult;
using testing::RunCommand;
using testing::TempDir;

CommandResult Fusetune(std::vector<std::string> args) {
  args.insert(args.begin(), FUSETUNE_BINARY);
  return RunCommand(args, 300);
}

TEST(Cli, NoCommandIsAUsageError) {
  CommandResult r = Fusetune({});
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

TEST(Cli, BadFlagsAreUsageErrorsAndCreateNothing) {
  TempDir dir;
  const std::string db = dir.File("never.db");
  const std::vector<std::vector<std::string>> cases = {
      {"sweep", "--db", db, "--bogus"},
      {"sweep", "--db", db, "--seq", "abc"},
      {"sweep", "--db", db, "--seq", "128", "--dtype", "fp64"},
      {"sweep", "--db", db, "--seq", "128", "--heads", "12", "--kv-heads", "5"},
      {"sweep", "--db", db, "--seq", "0"},
      {"sweep", "--db", db, "--seq", "128", "--head-dim", "7"},
      {"sweep", "--db", db},
      {"sweep", "--db", db, "--seq", "128", "--preset", "seed"},
      {"sweep", "--db", db, "--preset", "nope"},
      {"sweep", "--db", db, "--seq", "128", "--backend", "tpu"},
      {"sweep", "--db", db, "--seq", "128", "--variants", "fused,bogus"},
      {"sweep", "--db", db, "--seq", "128", "--precisions", "fp8"},
      {"sweep", "--db", db, "--seq", "128", "--precisions", "fp16"},  // nothing left for fp32 storage
      {"sweep", "--db", db, "--seq", "128", "--max-trials", "-1"},
      {"sweep", "--db", db, "--seq", "128", "--kv-seq", "1,2,3"},
      {"sweep", "--db", db, "--seq", "128", "--batch", "99999999999"},
      {"best", "--db", db},
      {"best", "--db", db, "--seq", "128,256"},
      {"bench", "--seq", "64", "--config", "garbage"},
      {"bench", "--seq", "64", "--block-s", "0"},
      {"report", "--db", db, "--unknown"},
      {"frobnicate"},
  };
  for (const auto& args : cases) {
    CommandResult r = Fusetune(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined << "\nstdout: " << r.out << "\nstderr: " << r.err;
    EXPECT_FALSE(r.err.empty()) << joined << ": a usage error says what is wrong";
    EXPECT_FALSE(std::filesystem::exists(db)) << joined << " created the database";
  }
}

TEST(Cli, EveryCommandHasHelp) {
  for (const char* command : {"sweep", "best", "report", "bench"}) {
    CommandResult r = Fusetune({command, "--help"});
    EXPECT_EQ(r.exit_code, 0) << command;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << command << ": " << r.out;
    EXPECT_NE(r.out.find("--"), std::string::npos) << command;
  }
  CommandResult top = Fusetune({"--help"});
  EXPECT_EQ(top.exit_code, 0);
  for (const char* command : {"sweep", "best", "report", "bench"}) {
    EXPECT_NE(top.out.find(command), std::string::npos) << command;
  }
  EXPECT_NE(top.out.find("Exit codes"), std::string::npos);
}

TEST(Cli, ReadingCommandsOnAMissingDatabaseFailWithoutCreatingIt) {
  TempDir dir;
  const std::string db = dir.File("missing.db");
  CommandResult r = Fusetune({"report", "--db", db});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("no database"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(db));
}

TEST(Cli, SweepThenReportJsonAndBest) {
  TempDir dir;
  const std::string db = dir.File("small.db");
  CommandResult sweep = Fusetune({"sweep", "--db", db, "--seq", "48,64", "--heads", "2", "--head-dim", "32",
                                  "--max-trials", "2", "--repeats", "3", "--causal"});
  ASSERT_EQ(sweep.exit_code, 0) << sweep.out << sweep.err;
  EXPECT_NE(sweep.out.find("[1/2]"), std::string::npos) << sweep.out;
  EXPECT_NE(sweep.out.find("[2/2]"), std::string::npos) << sweep.out;
  EXPECT_NE(sweep.out.find("remaining"), std::string::npos) << sweep.out;

  CommandResult report = Fusetune({"report", "--db", db, "--json"});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  nlohmann::json rows = nlohmann::json::parse(report.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(rows.is_array()) << report.out;
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    for (const char* field : {"problem", "config", "median_us", "tflops", "speedup_vs_materialized",
                              "speedup_vs_partial", "max_rel_error", "device_class", "run_id", "commit"}) {
      EXPECT_TRUE(row.contains(field)) << field << " missing in " << row.dump();
    }
    EXPECT_GT(row["speedup_vs_materialized"].get<double>(), 0);
    EXPECT_GT(row["speedup_vs_partial"].get<double>(), 0);
    EXPECT_GT(row["median_us"].get<double>(), 0);
  }
  CommandResult table = Fusetune({"report", "--db", db});
  ASSERT_EQ(table.exit_code, 0);
  EXPECT_NE(table.out.find("fused vs materialized"), std::string::npos) << table.out;

  CommandResult best = Fusetune({"best", "--db", db, "--seq", "64", "--heads", "2", "--head-dim", "32",
                                 "--causal", "--json"});
  ASSERT_EQ(best.exit_code, 0) << best.err;
  nlohmann::json b = nlohmann::json::parse(best.out, nullptr, false);
  ASSERT_TRUE(b.is_object()) << best.out;
  bool found = false;
  for (const auto& row : rows) found |= row["problem"] == b["problem"] && row["config"] == b["config"];
  EXPECT_TRUE(found) << best.out;

  CommandResult missing = Fusetune({"best", "--db", db, "--seq", "80", "--heads", "2", "--head-dim", "32"});
  EXPECT_EQ(missing.exit_code, 3) << missing.err;
}

TEST(Cli, BenchTimesEachVariant) {
  CommandResult r = Fusetune({"bench", "--seq", "64", "--heads", "2", "--head-dim", "32", "--repeats", "3",
                              "--block-m", "16", "--block-s", "16", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json rows = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(rows.is_array()) << r.out;
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& row : rows) {
    EXPECT_EQ(row["outcome"], "ok") << row.dump();
    EXPECT_GT(row["median_us"].get<double>(), 0);
  }
}

}  // namespace
}  // namespace fusetune
