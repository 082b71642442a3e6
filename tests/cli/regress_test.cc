// `fusetune bench --suite` and `fusetune regress` as a user runs them, on the CPU backend: a
// suite measured and stored, two builds compared interleaved (here the same binary twice, one
// side with a planted slowdown), a stored baseline with confirmation, the reports, and every
// kind of bad input exiting 2 with nothing written.
#include <sqlite3.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace fusetune {
namespace {

using testing::CommandResult;
using testing::ReadFile;
using testing::RunCommand;
using testing::TempDir;

CommandResult Fusetune(std::vector<std::string> args) {
  args.insert(args.begin(), FUSETUNE_BINARY);
  return RunCommand(args, 600);
}

// The commit this build reports ("0.1.0 (commit 44cca60a0cf9)").
std::string BuiltCommit() {
  const CommandResult r = Fusetune({"--version"});
  std::smatch m;
  std::regex_search(r.out, m, std::regex("commit ([0-9a-z]+)"));
  return m.size() > 1 ? m[1].str() : "unknown";
}

// Two small problems, two cells each; short blocks so a comparison takes seconds.
std::string WriteSuite(const TempDir& dir, const std::string& extra_cell = "") {
  const std::string path = dir.File("suite.json");
  std::ofstream(path) << R"({"name": "tiny", "block": {"warmup": 1, "repeats": 3, "max_seconds": 0.2, "flush_l2": false},
    "blocks": 6, "cells": [
    {"problem": "prefill/b1/hq2/hkv2/q64/k64/d32/causal0/fp32", "config": "fused/bm16/bs16/t1/fp32/st1", "role": "best"},
    {"problem": "prefill/b1/hq2/hkv2/q64/k64/d32/causal0/fp32", "config": "materialized/bm16/bs16/t1/fp32/st1", "role": "materialized"},
    {"problem": "prefill/b1/hq2/hkv1/q96/k96/d32/causal1/fp32", "config": "fused/bm32/bs16/t1/fp32/st1", "role": "best"},
    {"problem": "prefill/b1/hq2/hkv1/q96/k96/d32/causal1/fp32", "config": "partial/bm32/bs32/t1/fp32/st1", "role": "reference"})"
                    << extra_cell << "]}";
  return path;
}

int64_t Count(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(h);
    return -1;
  }
  sqlite3_stmt* s = nullptr;
  int64_t n = -1;
  if (sqlite3_prepare_v2(h, sql.c_str(), -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
    n = sqlite3_column_int64(s, 0);
  }
  sqlite3_finalize(s);
  sqlite3_close(h);
  return n;
}

void Execute(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(h);
}

const char kPlantOnFusedCausal[] = "q96/k96/d32/causal1/fp32 fused=1.0";  // 2x slower
// Against a stored run the blocks of the two sides are measured at different times, so on a
// loaded machine their spread is wide; a 5x slowdown stays beyond it.
const char kPlantFiveTimesOnFusedCausal[] = "q96/k96/d32/causal1/fp32 fused=4.0";

TEST(BenchSuite, MeasuresAndStoresEveryCell) {
  TempDir dir;
  const std::string db = dir.File("f.db");
  CommandResult r = Fusetune({"bench", "--suite", WriteSuite(dir), "--db", db});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("stored as bench run"), std::string::npos) << r.out;
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM bench_cells"), 4);
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM runs WHERE label = 'bench:tiny' AND finished_unix_ms > 0"), 1);
}

TEST(BenchSuite, TheCheckedInCpuSuiteRuns) {
  TempDir dir;
  CommandResult r = Fusetune({"bench", "--suite", std::string(FUSETUNE_SOURCE_DIR) + "/suites/cpu.json", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_GE(j.at("cells").size(), 6u);
  for (const auto& cell : j.at("cells")) EXPECT_EQ(cell.at("outcome"), "ok") << cell.dump();
}

TEST(BenchSuite, AConfigTheDeviceCannotRunIsAnErrorAndNothingIsStored) {
  TempDir dir;
  const std::string db = dir.File("f.db");
  const std::string suite = WriteSuite(
      dir, R"(, {"problem": "prefill/b1/hq2/hkv2/q64/k64/d32/causal0/fp32", "config": "fused/bm16/bs16/t1/fp32/st1/sk2"})");
  CommandResult r = Fusetune({"bench", "--suite", suite, "--db", db});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("cannot run"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(db));
}

TEST(BenchSuite, APlantedRunIsNotStoredAndSaysWhatWasPlanted) {
  TempDir dir;
  const std::string db = dir.File("f.db");
  const std::string suite = WriteSuite(dir);
  CommandResult r = Fusetune({"bench", "--suite", suite, "--db", db, "--plant-slowdown", "fused=0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("planted slowdowns"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not stored"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(db) && Count(db, "SELECT COUNT(*) FROM runs") > 0);
  CommandResult none = Fusetune({"bench", "--suite", suite, "--plant-slowdown", "nothing-like-this=0.5"});
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_NE(none.err.find("is in no cell"), std::string::npos) << none.err;
}

TEST(BenchSuite, ASuiteIsWrittenFromADatabasesBestConfigsAndRuns) {
  TempDir dir;
  const std::string db = dir.File("tuned.db");
  CommandResult sweep = Fusetune({"sweep", "--db", db, "--seq", "64", "--heads", "2", "--head-dim", "32",
                                  "--max-trials", "6", "--max-seconds", "20"});
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  const std::string suite = dir.File("from-db.json");
  CommandResult written = Fusetune({"bench", "--from-db", db, "--suite-out", suite});
  ASSERT_EQ(written.exit_code, 0) << written.err;
  const nlohmann::json j = nlohmann::json::parse(ReadFile(suite));
  EXPECT_EQ(j.at("name"), "from-db");
  ASSERT_GE(j.at("cells").size(), 1u);
  EXPECT_EQ(j.at("cells")[0].at("role"), "best");
  CommandResult bench = Fusetune({"bench", "--suite", suite, "--blocks", "3"});
  EXPECT_EQ(bench.exit_code, 0) << bench.err;
}

TEST(BenchSuite, ADatabaseWithoutBestConfigsWritesNoSuite) {
  TempDir dir;
  const std::string db = dir.File("f.db");
  ASSERT_EQ(Fusetune({"bench", "--suite", WriteSuite(dir), "--db", db}).exit_code, 0);  // no best configs
  CommandResult r = Fusetune({"bench", "--from-db", db, "--suite-out", dir.File("out.json")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("no best configs"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.File("out.json")));
  EXPECT_EQ(Fusetune({"bench", "--from-db", dir.File("missing.db"), "--suite-out", dir.File("out.json")}).exit_code, 2);
}

TEST(Regress, APlantedSlowdownIsARegressionWithReports) {
  TempDir dir;
  const std::string db = dir.File("f.db");
  const std::string commit = BuiltCommit();
  CommandResult r = Fusetune({"regress", "--suite", WriteSuite(dir), "--baseline", commit, "--commit", commit,
                              "--baseline-binary", FUSETUNE_BINARY, "--db", db, "--plant-slowdown", kPlantOnFusedCausal,
                              "--junit", dir.File("out/junit.xml"), "--markdown", dir.File("out/report.md"),
                              "--json", dir.File("out/run.json"), "--round-order", "mirrored"});
  ASSERT_EQ(r.exit_code, 1) << r.err << r.out;
  // The JSON holds every cell with both builds' blocks, judged on per-round pairs, and how the
  // rounds were ordered (the report says it too).
  const nlohmann::json run = nlohmann::json::parse(ReadFile(dir.File("out/run.json")));
  EXPECT_TRUE(run["interleaved"].get<bool>());
  EXPECT_EQ(run["round_order"], "mirrored");
  EXPECT_NE(r.out.find("each round's blocks in mirrored order"), std::string::npos) << r.out;
  ASSERT_GE(run["cells"].size(), 4u);
  int regressed = 0;
  for (const nlohmann::json& cell : run["cells"]) {
    EXPECT_TRUE(cell["verdict"]["paired"].get<bool>()) << cell.dump();
    EXPECT_EQ(cell["baseline"]["blocks"].size(), cell["candidate"]["blocks"].size()) << cell.dump();
    EXPECT_GE(cell["candidate"]["blocks"].size(), 3u);
    regressed += cell["verdict"]["verdict"] == "regressed" ? 1 : 0;
  }
  EXPECT_GE(regressed, 1);
  const std::string junit = ReadFile(dir.File("out/junit.xml"));
  EXPECT_NE(junit.find("<testsuite"), std::string::npos);
  EXPECT_EQ(std::count(junit.begin(), junit.end(), '<') > 4, true);
  EXPECT_NE(junit.find("type=\"regressed\""), std::string::npos) << junit;
  const std::string report = ReadFile(dir.File("out/report.md"));
  EXPECT_NE(report.find("interleaved"), std::string::npos) << report;
  EXPECT_EQ(r.out.find(report.substr(0, 40)), 0u);
  // The planted cell regressed; its row is stored with the others.
  // A run with planted slowdowns stores "planted_latency" rows, never read as an A/A calibration.
  EXPECT_GE(Count(db, "SELECT COUNT(*) FROM regressions WHERE verdict = 'regressed' AND metric = 'planted_latency' AND "
                      "problem_key LIKE '%q96/k96%' AND config_key LIKE 'fused/%'"), 1);
  EXPECT_GE(Count(db, "SELECT COUNT(*) FROM regressions WHERE metric = 'planted_latency'"), 4);
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM regressions WHERE metric = 'latency'"), 0);
  // Both sides in one process (the planted slowdown on the candidate's library side).
  EXPECT_NE(r.out.find("floors come from the blocks alone"), std::string::npos) << r.out;
  // A planted run is a check of the method, never a measurement: no bench run is stored (it
  // could become a baseline or a history point), and every output says what was planted.
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM runs WHERE label = 'bench:tiny'"), 0);
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM bench_cells"), 0);
  EXPECT_NE(r.out.find(std::string("planted slowdowns on the candidate") ), std::string::npos) << r.out;
  EXPECT_NE(report.find(kPlantOnFusedCausal), std::string::npos) << report;
  EXPECT_NE(junit.find("<property name=\"planted_slowdowns\" value=\"" + std::string(kPlantOnFusedCausal) + "\"/>"),
            std::string::npos)
      << junit;
  // `fusetune regressions` is the server's; the rows are what ListRegressions serves.
}

// A build older than bench-serve is a C ABI library: this build's bench-serve serves its kernels.
TEST(Regress, ABaselineThatIsACapiLibraryIsServedThroughThisBuildsBenchServe) {
  TempDir dir;
  const std::string commit = BuiltCommit();
  CommandResult r = Fusetune({"regress", "--suite", WriteSuite(dir), "--baseline", commit, "--commit", commit,
                              "--baseline-binary", FUSETUNE_CAPI_LIBRARY, "--db", dir.File("f.db"), "--plant-slowdown",
                              kPlantOnFusedCausal, "--markdown", dir.File("report.md")});
  ASSERT_EQ(r.exit_code, 1) << r.err << r.out;
  const std::string report = ReadFile(dir.File("report.md"));
  EXPECT_NE(report.find("regressed"), std::string::npos) << report;
  EXPECT_GE(Count(dir.File("f.db"), "SELECT COUNT(*) FROM regressions WHERE verdict = 'regressed' AND "
                                    "problem_key LIKE '%q96/k96%' AND config_key LIKE 'fused/%'"),
            1);
  // A library that is not one: exit 2, nothing stored.
  const std::string fake = dir.File("libfusetune_capi.so.1");
  std::ofstream(fake) << "not a library";
  r = Fusetune({"regress", "--suite", WriteSuite(dir), "--baseline", commit, "--commit", commit, "--baseline-binary",
                fake, "--db", dir.File("g.db")});
  EXPECT_EQ(r.exit_code, 2) << r.err << r.out;
  EXPECT_NE(r.err.find("cannot load"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.File("g.db")) && Count(dir.File("g.db"), "SELECT COUNT(*) FROM regressions") > 0);
}

TEST(Regress, ABestConfigReTunedAtTheCandidateAddsAPickCell) {
  TempDir dir;
  const std::string db = dir.File("f.db");
  const std::string suite = WriteSuite(dir);
  CommandResult bench = Fusetune({"bench", "--suite", suite, "--db", db, "--json"});
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  const std::string device_class = nlohmann::json::parse(bench.out).at("device_class");
  const std::string commit = BuiltCommit();
  // A re-tune at the candidate commit picked another config for the first problem.
  Execute(db, "INSERT INTO best_configs (device_class, problem_key, config_key, commit_hash, updated_unix_ms) VALUES ('" +
                  device_class + "', 'prefill/b1/hq2/hkv2/q64/k64/d32/causal0/fp32', 'fused/bm32/bs32/t1/fp32/st1', '" +
                  commit + "', 1)");
  CommandResult r = Fusetune({"regress", "--suite", suite, "--baseline", commit, "--commit", commit,
                              "--baseline-binary", FUSETUNE_BINARY, "--db", db});
  ASSERT_NE(r.exit_code, 2) << r.err;
  EXPECT_NE(r.out.find("picks fused/bm32/bs32/t1/fp32/st1 instead of fused/bm16/bs16/t1/fp32/st1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fused/bm32/bs32/t1/fp32/st1 (was fused/bm16/bs16/t1/fp32/st1)"), std::string::npos) << r.out;
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM regressions WHERE metric = 'latency_vs_previous_pick' AND "
                      "config_key = 'fused/bm32/bs32/t1/fp32/st1'"), 1);
  // The old pick is still measured at the candidate, as its own cell (an A/A row here: the same
  // commit on both sides, in one process).
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM regressions WHERE metric = 'latency_one_process_aa' AND "
                      "config_key = 'fused/bm16/bs16/t1/fp32/st1'"),
            1);
}

TEST(Regress, AnAARunIsACalibrationThatDoesNotGate) {
  // A build against itself measures how far its two sides differ: whatever its timing
  // verdicts, it exits 0 and every report says it is a calibration. By default both sides are
  // the build's C ABI library (beside it in the build tree) in one process.
  TempDir dir;
  const std::string db = dir.File("f.db");
  const std::string commit = BuiltCommit();
  CommandResult r = Fusetune({"regress", "--suite", WriteSuite(dir), "--baseline", commit, "--commit", commit,
                              "--baseline-binary", FUSETUNE_BINARY, "--db", db, "--fail-on-unknown", "--junit",
                              dir.File("junit.xml"), "--markdown", dir.File("report.md"), "--json",
                              dir.File("comparison.json")});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("A/A calibration of"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("calls no cell regressed or improved"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the build's two sides in one process differed by"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("both builds are measured in one process on the same inputs, through their C ABI libraries"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("(an A/A calibration)"), std::string::npos) << r.out;
  EXPECT_NE(ReadFile(dir.File("report.md")).find("A/A calibration of"), std::string::npos);
  EXPECT_NE(ReadFile(dir.File("junit.xml")).find("<property name=\"calibration\""), std::string::npos);
  EXPECT_TRUE(nlohmann::json::parse(ReadFile(dir.File("comparison.json"))).at("one_process").get<bool>());
  // Its rows are stored under their own metric (no between-process noise for later floors);
  // none says regressed or improved.
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM regressions WHERE metric = 'latency_one_process_aa' AND "
                      "commit_hash = baseline_commit"),
            4);
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM regressions WHERE metric = 'latency'"), 0);
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM regressions WHERE verdict IN ('regressed', 'improved')"), 0);
  // The next run in one process reads it for its floors.
  r = Fusetune({"regress", "--suite", WriteSuite(dir), "--baseline", commit, "--commit", commit, "--baseline-binary",
                FUSETUNE_BINARY, "--db", db});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("floors include the one-process A/A noise of 4 cell(s), from up to 1 calibration(s)"),
            std::string::npos)
      << r.out;
}

TEST(Regress, ABuildWithoutItsLibraryIsMeasuredInAProcessOfItsOwn) {
  // The baseline's binary copied away from its build tree has no libfusetune_capi.so beside it.
  TempDir dir;
  const std::string commit = BuiltCommit();
  const std::string alone = dir.File("fusetune");
  std::filesystem::copy_file(FUSETUNE_BINARY, alone);
  std::filesystem::permissions(alone, std::filesystem::perms::owner_exec, std::filesystem::perm_options::add);
  CommandResult r = Fusetune({"regress", "--suite", WriteSuite(dir), "--baseline", commit, "--commit", commit,
                              "--baseline-binary", alone, "--db", dir.File("f.db"), "--json", dir.File("c.json")});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("the baseline is measured in a bench-serve process of its own (no libfusetune_capi.so beside"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("two processes of the build differed by"), std::string::npos) << r.out;
  EXPECT_FALSE(nlohmann::json::parse(ReadFile(dir.File("c.json"))).at("one_process").get<bool>());
  EXPECT_EQ(Count(dir.File("f.db"), "SELECT COUNT(*) FROM regressions WHERE metric = 'latency'"), 4);
  // --separate-processes asks for the same with the library at hand.
  r = Fusetune({"regress", "--suite", WriteSuite(dir), "--baseline", commit, "--commit", commit, "--baseline-binary",
                FUSETUNE_BINARY, "--db", dir.File("g.db"), "--separate-processes"});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("process of its own (--separate-processes)"), std::string::npos) << r.out;
}

TEST(Regress, AnAARunCalibratesTheFloorsOfLaterRuns) {
  TempDir dir;
  const std::string db = dir.File("f.db");
  const std::string commit = BuiltCommit();
  // Calibrations of two processes: what floors of later runs in two processes read.
  const std::vector<std::string> aa = {"regress", "--suite", WriteSuite(dir), "--baseline", commit, "--commit", commit,
                                       "--baseline-binary", FUSETUNE_BINARY, "--db", db, "--separate-processes"};
  CommandResult first = Fusetune(aa);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM regressions WHERE metric = 'latency' AND commit_hash = baseline_commit"), 4);
  CommandResult second = Fusetune(aa);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(second.out.find("floors include the between-process A/A noise of 4 cell(s), from up to 1 calibration(s)"),
            std::string::npos)
      << second.out;
  // Every stored calibration counts, not only the newest.
  CommandResult third = Fusetune(aa);
  ASSERT_EQ(third.exit_code, 0) << third.err;
  EXPECT_NE(third.out.find("floors include the between-process A/A noise of 4 cell(s), from up to 2 calibration(s)"),
            std::string::npos)
      << third.out;
  // A run in one process has no between-process term to add.
  std::vector<std::string> one_process = aa;
  one_process.pop_back();
  CommandResult fourth = Fusetune(one_process);
  ASSERT_EQ(fourth.exit_code, 0) << fourth.err;
  EXPECT_NE(fourth.out.find("floors come from the blocks alone"), std::string::npos) << fourth.out;
  EXPECT_EQ(fourth.out.find("floors include the between-process"), std::string::npos) << fourth.out;
}

// The verdict of every cell of a comparison file, in order.
std::vector<std::string> VerdictsIn(const std::string& path) {
  std::vector<std::string> out;
  for (const nlohmann::json& cell : nlohmann::json::parse(ReadFile(path)).at("cells")) {
    out.push_back(cell.at("verdict").at("verdict").get<std::string>());
  }
  return out;
}

TEST(Rejudge, JudgesAWrittenComparisonAgainWithOtherFloorsAndCalibrations) {
  TempDir dir;
  const std::string commit = BuiltCommit();
  const std::vector<std::string> aa = {"regress", "--suite", WriteSuite(dir), "--baseline", commit, "--commit", commit,
                                       "--baseline-binary", FUSETUNE_BINARY, "--db", dir.File("f.db")};
  std::vector<std::string> run = aa;
  run.insert(run.end(), {"--json", dir.File("aa.json")});
  const CommandResult calibrated = Fusetune(run);
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.err;
  EXPECT_NE(calibrated.out.find("p-values adjusted across the 4 cells: holm"), std::string::npos) << calibrated.out;
  // The planted run's floors include the A/A run's calibration, which the database holds.
  run = aa;
  run.insert(run.end(), {"--json", dir.File("planted.json"), "--plant-slowdown", kPlantOnFusedCausal});
  const int planted_exit = Fusetune(run).exit_code;
  ASSERT_TRUE(planted_exit == 0 || planted_exit == 1);

  // Judged again with the calibration it had: the run's own verdicts and exit status, whatever
  // this (possibly loaded) host measured.
  CommandResult r = Fusetune({"rejudge", dir.File("planted.json"), "--calibration", dir.File("aa.json"), "--markdown",
                              dir.File("again.md"), "--json", dir.File("again.json")});
  EXPECT_EQ(r.exit_code, planted_exit) << r.err << r.out;
  EXPECT_EQ(VerdictsIn(dir.File("again.json")), VerdictsIn(dir.File("planted.json"))) << r.out;
  EXPECT_NE(r.out.find("Re-judged 4 cells: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("4 cell(s) calibrated by up to 1 A/A file(s)"), std::string::npos) << r.out;
  EXPECT_NE(ReadFile(dir.File("again.md")).find("Re-judged 4 cells"), std::string::npos);
  // Other floors: said in the report; the calibrated minimum needs 3 calibrations per cell.
  r = Fusetune({"rejudge", dir.File("planted.json"), "--calibration", dir.File("aa.json"), "--calibrated-min-floor",
                "0.005"});
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.err;
  EXPECT_NE(r.out.find("0.50% for cells with at least 3 calibrations"), std::string::npos) << r.out;
  r = Fusetune({"rejudge", dir.File("aa.json"), "--min-floor", "0.02"});
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.err;
  EXPECT_NE(r.out.find("Floor minimum 2.00%; p-values adjusted: holm; no calibration."), std::string::npos) << r.out;
  // Another correction: said in the report, and each cell's p-value then stands unadjusted.
  r = Fusetune({"rejudge", dir.File("planted.json"), "--correction", "none", "--json", dir.File("none.json")});
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.err;
  EXPECT_NE(r.out.find("p-values adjusted: none"), std::string::npos) << r.out;
  for (const nlohmann::json& cell : nlohmann::json::parse(ReadFile(dir.File("none.json"))).at("cells")) {
    const nlohmann::json& v = cell.at("verdict");
    EXPECT_DOUBLE_EQ(v.at("p_slower_adjusted").get<double>(), v.at("p_slower").get<double>());
  }
  r = Fusetune({"rejudge", dir.File("planted.json"), "--correction", "bonferroni"});
  EXPECT_EQ(r.exit_code, 2) << "not a correction";

  // Bad input: exit 2, saying why.
  r = Fusetune({"rejudge", dir.File("missing.json")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cannot read"), std::string::npos) << r.err;
  std::ofstream(dir.File("broken.json")) << "{\"cells\": [";
  r = Fusetune({"rejudge", dir.File("broken.json")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("malformed JSON"), std::string::npos) << r.err;
  // A calibration made in two processes does not calibrate a comparison made in one.
  run = aa;
  run.insert(run.end(), {"--json", dir.File("two.json"), "--separate-processes"});
  ASSERT_EQ(Fusetune(run).exit_code, 0);
  r = Fusetune({"rejudge", dir.File("planted.json"), "--calibration", dir.File("two.json")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("must be made the same way"), std::string::npos) << r.err;
  r = Fusetune({"rejudge", dir.File("planted.json"), "--calibrated-min-floor", "0.5"});
  EXPECT_EQ(r.exit_code, 2) << "out of range";
}

TEST(Regress, AnUnknownCellFailsTheRunOnlyWithFailOnUnknown) {
  // The stored baseline never measured the suite's one cell: it is unknown, with the reason.
  TempDir dir;
  const std::string db = dir.File("f.db");
  ASSERT_EQ(Fusetune({"bench", "--suite", WriteSuite(dir), "--db", db}).exit_code, 0);
  Execute(db, "UPDATE runs SET commit_hash = 'abcdef123456'");
  const std::string suite = dir.File("other.json");
  std::ofstream(suite) << R"({"name": "tiny", "block": {"warmup": 1, "repeats": 3, "max_seconds": 0.2, "flush_l2": false},
    "blocks": 3, "cells": [
    {"problem": "prefill/b1/hq2/hkv2/q64/k64/d32/causal0/fp32", "config": "fused/bm32/bs32/t1/fp32/st1", "role": "best"}]})";
  const std::vector<std::string> args = {"regress", "--suite", suite, "--baseline", "abcdef1", "--commit", BuiltCommit(),
                                         "--db", db, "--markdown", dir.File("report.md")};
  CommandResult lenient = Fusetune(args);
  EXPECT_EQ(lenient.exit_code, 0) << lenient.err << lenient.out;
  EXPECT_NE(lenient.out.find("0 regressed, 0 improved, 0 same, 1 unknown"), std::string::npos) << lenient.out;
  EXPECT_NE(ReadFile(dir.File("report.md")).find("Why unknown:"), std::string::npos);
  EXPECT_NE(ReadFile(dir.File("report.md")).find("the baseline has nothing to compare with"), std::string::npos);
  std::vector<std::string> strict = args;
  strict.push_back("--fail-on-unknown");
  CommandResult failed = Fusetune(strict);
  EXPECT_EQ(failed.exit_code, 1) << failed.err << failed.out;
  EXPECT_NE(failed.err.find("1 cell(s) unknown and --fail-on-unknown"), std::string::npos) << failed.err;
}

TEST(Regress, AnAARunNamedByShortCommitsCalibratesToo) {
  // The commits as a user types them (7 hex digits): the rows store the build's own full
  // commit on both sides, so the next run finds the calibration.
  TempDir dir;
  const std::string db = dir.File("f.db");
  const std::string full = BuiltCommit();
  if (full == "unknown" || full.size() < 8) GTEST_SKIP() << "this build has no commit (built outside git)";
  const std::string commit = full.substr(0, 7);
  const std::vector<std::string> aa = {"regress", "--suite", WriteSuite(dir), "--baseline", commit, "--commit", commit,
                                       "--baseline-binary", FUSETUNE_BINARY, "--db", db, "--separate-processes"};
  CommandResult first = Fusetune(aa);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM regressions WHERE metric = 'latency' AND commit_hash = baseline_commit AND "
                      "commit_hash = '" + full + "'"),
            4);
  CommandResult second = Fusetune(aa);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(second.out.find("floors include the between-process A/A noise of 4 cell(s)"), std::string::npos) << second.out;
}

std::string Uppercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

TEST(Regress, AnAARunCalibratesLaterRunsWhateverFormTheCommitsAreWrittenIn) {
  // The same commit, written as the build reports it, in upper case, and abbreviated: one
  // commit, stored in one form, so each later run finds the calibration.
  TempDir dir;
  const std::string db = dir.File("f.db");
  const std::string built = BuiltCommit();
  if (built == "unknown") GTEST_SKIP() << "this build has no commit (built outside git)";
  const std::string suite = WriteSuite(dir);
  auto aa = [&](const std::string& baseline, const std::string& commit) {
    return Fusetune({"regress", "--suite", suite, "--baseline", baseline, "--commit", commit, "--baseline-binary",
                     FUSETUNE_BINARY, "--db", db, "--separate-processes"});
  };
  CommandResult first = aa(Uppercase(built), Uppercase(built));
  ASSERT_NE(first.exit_code, 2) << first.err;
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM regressions WHERE metric = 'latency' AND commit_hash = '" + built +
                          "' AND baseline_commit = '" + built + "'"),
            4);
  CommandResult second = aa(built.substr(0, 7), Uppercase(built.substr(0, 9)));
  ASSERT_NE(second.exit_code, 2) << second.err;
  EXPECT_NE(second.out.find("floors include the between-process A/A noise of 4 cell(s), from up to 1 calibration(s) "
                            "each (the newest at " + built + ")"),
            std::string::npos)
      << second.out;
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM regressions WHERE commit_hash != '" + built + "' OR baseline_commit != '" +
                          built + "'"),
            0);
}

TEST(Regress, AnAbbreviationThatNamesNoCommitOfTheBuildIsRefused) {
  TempDir dir;
  const std::string built = BuiltCommit();
  if (built == "unknown") GTEST_SKIP() << "this build has no commit (built outside git)";
  const std::string other = built[0] == 'f' ? "0000000" : "fffffff";
  CommandResult r = Fusetune({"regress", "--suite", WriteSuite(dir), "--baseline", other, "--commit", built,
                              "--baseline-binary", FUSETUNE_BINARY, "--db", dir.File("f.db")});
  EXPECT_EQ(r.exit_code, 2) << r.err << r.out;
  EXPECT_NE(r.err.find("was built at commit " + built + ", not " + other), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.File("f.db")) &&
               Count(dir.File("f.db"), "SELECT COUNT(*) FROM regressions") > 0);
}

TEST(Regress, AStoredBaselineIsFoundByAnyFormOfItsCommit) {
  TempDir dir;
  const std::string db = dir.File("f.db");
  const std::string suite = WriteSuite(dir);
  ASSERT_EQ(Fusetune({"bench", "--suite", suite, "--db", db}).exit_code, 0);
  Execute(db, "UPDATE runs SET commit_hash = 'abcdef123456'");
  const std::string commit = BuiltCommit();
  // The full hash, in upper case, as a CI system might pass it.
  CommandResult r = Fusetune({"regress", "--suite", suite, "--baseline", "ABCDEF1234567890ABCDEF1234567890ABCDEF12",
                              "--commit", commit, "--db", db, "--rebuild-command", std::string("echo ") + FUSETUNE_BINARY});
  EXPECT_NE(r.exit_code, 2) << r.err;
  EXPECT_NE(r.out.find("against abcdef123456"), std::string::npos) << r.out;
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM regressions WHERE baseline_commit = 'abcdef123456'"),
            Count(db, "SELECT COUNT(*) FROM regressions"));
}

TEST(Regress, AStoredBaselineIsComparedAndFlaggedCellsAreConfirmedWithARebuild) {
  TempDir dir;
  const std::string db = dir.File("f.db");
  const std::string suite = WriteSuite(dir);
  ASSERT_EQ(Fusetune({"bench", "--suite", suite, "--db", db}).exit_code, 0);
  // The stored run stands for last night's build (whose binary is gone).
  Execute(db, "UPDATE runs SET commit_hash = 'abcdef123456'");
  const std::string commit = BuiltCommit();
  const std::vector<std::string> base = {"regress", "--suite", suite, "--baseline", "abcdef1", "--commit", commit,
                                         "--db", db, "--plant-slowdown", kPlantFiveTimesOnFusedCausal};
  // Without a way to rebuild the baseline, a flagged cell is not reported as a regression.
  CommandResult unconfirmed = Fusetune(base);
  EXPECT_EQ(unconfirmed.exit_code, 2) << unconfirmed.err << unconfirmed.out;
  EXPECT_NE(unconfirmed.err.find("could not be confirmed"), std::string::npos) << unconfirmed.err;
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM regressions WHERE verdict = 'regressed' AND metric = 'latency'"), 0);
  // The rebuild command prints the baseline's binary: the flag is confirmed interleaved.
  std::vector<std::string> confirm = base;
  confirm.insert(confirm.end(), {"--rebuild-command", std::string("echo building {commit} >&2; echo ") + FUSETUNE_BINARY});
  CommandResult confirmed = Fusetune(confirm);
  EXPECT_EQ(confirmed.exit_code, 1) << confirmed.err << confirmed.out;
  EXPECT_NE(confirmed.err.find("building abcdef123456"), std::string::npos) << confirmed.err;
  EXPECT_NE(confirmed.out.find("measured again interleaved"), std::string::npos) << confirmed.out;
}

TEST(Regress, PreviousIsTheNewestBenchRunAtAnotherCommit) {
  TempDir dir;
  const std::string db = dir.File("f.db");
  const std::string suite = WriteSuite(dir);
  ASSERT_EQ(Fusetune({"bench", "--suite", suite, "--db", db}).exit_code, 0);
  Execute(db, "UPDATE runs SET commit_hash = 'abcdef123456'");
  const std::string commit = BuiltCommit();
  // The stored run is the baseline; a flagged cell (noise) is confirmed with this build.
  CommandResult r = Fusetune({"regress", "--suite", suite, "--baseline", "previous", "--commit", commit, "--db", db,
                              "--rebuild-command", std::string("echo ") + FUSETUNE_BINARY});
  EXPECT_NE(r.exit_code, 2) << r.err;
  EXPECT_NE(r.out.find("against abcdef123456"), std::string::npos) << r.out;
  EXPECT_EQ(Count(db, "SELECT COUNT(*) FROM regressions WHERE baseline_commit = 'abcdef123456'"),
            Count(db, "SELECT COUNT(*) FROM regressions"));
}

// Bad input: a clear message, exit 2, and the database as it was.
class RegressBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = dir_.File("f.db");
    suite_ = WriteSuite(dir_);
    ASSERT_EQ(Fusetune({"bench", "--suite", suite_, "--db", db_}).exit_code, 0);
    Execute(db_, "UPDATE runs SET commit_hash = 'abcdef123456'");
    commit_ = BuiltCommit();
  }
  void ExpectRefused(const std::vector<std::string>& args, const std::string& message) {
    const int64_t runs = Count(db_, "SELECT COUNT(*) FROM runs");
    CommandResult r = Fusetune(args);
    EXPECT_EQ(r.exit_code, 2) << r.err << r.out;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_EQ(Count(db_, "SELECT COUNT(*) FROM runs"), runs);
    EXPECT_EQ(Count(db_, "SELECT COUNT(*) FROM regressions"), 0);
  }
  TempDir dir_;
  std::string db_, suite_, commit_;
};

TEST_F(RegressBadInput, AFloorOrTimeBudgetOutOfRange) {
  for (const char* floor : {"-0.01", "0.2", "x"}) {
    CommandResult r = Fusetune({"regress", "--suite", suite_, "--baseline", commit_, "--commit", commit_,
                                "--baseline-binary", FUSETUNE_BINARY, "--db", db_, "--min-floor", floor});
    EXPECT_EQ(r.exit_code, 2) << floor << r.err;
    EXPECT_NE(r.err.find("--min-floor"), std::string::npos) << r.err;
  }
  CommandResult r = Fusetune({"regress", "--suite", suite_, "--baseline", commit_, "--commit", commit_,
                              "--baseline-binary", FUSETUNE_BINARY, "--db", db_, "--max-measure-seconds", "-1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--max-measure-seconds"), std::string::npos) << r.err;
  EXPECT_EQ(Count(db_, "SELECT COUNT(*) FROM regressions"), 0);
}

TEST_F(RegressBadInput, AnUnknownRoundOrder) {
  CommandResult r = Fusetune({"regress", "--suite", suite_, "--baseline", commit_, "--commit", commit_,
                              "--baseline-binary", FUSETUNE_BINARY, "--db", db_, "--round-order", "sorted"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--round-order"), std::string::npos) << r.err;
  EXPECT_EQ(Count(db_, "SELECT COUNT(*) FROM regressions"), 0);
}

TEST_F(RegressBadInput, AnUnknownBaselineCommit) {
  ExpectRefused({"regress", "--suite", suite_, "--baseline", "0123456789ab", "--commit", commit_, "--db", db_},
                "abcdef123456");  // the message lists the commits that exist
}

TEST_F(RegressBadInput, AnAbbreviationOfSeveralStoredCommits) {
  ASSERT_EQ(Fusetune({"bench", "--suite", suite_, "--db", db_}).exit_code, 0);
  Execute(db_, "UPDATE runs SET commit_hash = 'abcdef100000' WHERE commit_hash != 'abcdef123456'");
  ExpectRefused({"regress", "--suite", suite_, "--baseline", "abcdef1", "--commit", commit_, "--db", db_},
                "abcdef100000, abcdef123456");
}

TEST_F(RegressBadInput, AnAbbreviationOfNoKnownCommit) {
  ExpectRefused({"regress", "--suite", suite_, "--baseline", "0123456", "--commit", commit_, "--db", db_},
                "give at least 12 hex digits");
}

TEST_F(RegressBadInput, ACandidateBuiltAtAnotherCommit) {
  ExpectRefused({"regress", "--suite", suite_, "--baseline", "abcdef1", "--commit", "fedcba987654", "--db", db_},
                "was built at commit");
}

TEST_F(RegressBadInput, ABaselineFromAnotherDeviceClass) {
  Execute(db_, "UPDATE runs SET device_json = replace(device_json, '\"backend\":\"cpu\"', '\"backend\":\"cuda\"')");
  ExpectRefused({"regress", "--suite", suite_, "--baseline", "abcdef1", "--commit", commit_, "--db", db_},
                "only the same device class compares");
}

TEST_F(RegressBadInput, ASuiteNamingAConfigTheDeviceCannotRun) {
  const std::string suite = WriteSuite(
      dir_, R"(, {"problem": "prefill/b1/hq2/hkv2/q64/k64/d32/causal0/fp32", "config": "fused/bm16/bs16/t1/fp32/st1/sk2"})");
  ExpectRefused({"regress", "--suite", suite, "--baseline", "abcdef1", "--commit", commit_, "--db", db_}, "cannot run");
  // Interleaved with a baseline build, too.
  ExpectRefused({"regress", "--suite", suite, "--baseline", commit_, "--commit", commit_, "--db", db_,
                 "--baseline-binary", FUSETUNE_BINARY},
                "cannot run");
}

TEST_F(RegressBadInput, ASuiteForAnotherDevice) {
  std::string text = ReadFile(suite_);
  text.replace(text.find("\"name\""), 0, "\"device_class\": \"cuda/NVIDIA-H200/sm90\", ");
  std::ofstream(dir_.File("h200.json")) << text;
  ExpectRefused({"regress", "--suite", dir_.File("h200.json"), "--baseline", "abcdef1", "--commit", commit_, "--db", db_},
                "is for cuda/NVIDIA-H200/sm90");
}

TEST_F(RegressBadInput, APlantedSlowdownThatMatchesNoCell) {
  ExpectRefused({"regress", "--suite", suite_, "--baseline", commit_, "--commit", commit_, "--db", db_,
                 "--baseline-binary", FUSETUNE_BINARY, "--plant-slowdown", "q4096=0.5"},
                "is in no cell");
}

TEST_F(RegressBadInput, AReportPathThatCannotBeWrittenBeforeAnythingIsMeasured) {
  ExpectRefused({"regress", "--suite", suite_, "--baseline", "abcdef1", "--commit", commit_, "--db", db_, "--junit",
                 "/proc/fusetune-junit.xml"},
                "--junit");
  ExpectRefused({"regress", "--suite", suite_, "--baseline", "abcdef1", "--commit", commit_, "--db", db_,
                 "--markdown", dir_.File("")},
                "is a directory");
  EXPECT_FALSE(std::filesystem::exists("/proc/fusetune-junit.xml"));
}

TEST(RegressEmptyDatabase, PreviousInAnEmptyOrMissingDatabaseIsAnError) {
  TempDir dir;
  const std::string suite = WriteSuite(dir);
  const std::string commit = BuiltCommit();
  CommandResult missing = Fusetune({"regress", "--suite", suite, "--baseline", "previous", "--commit", commit, "--db", dir.File("none.db")});
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_FALSE(std::filesystem::exists(dir.File("none.db")));
  // A database without bench runs.
  const std::string empty = dir.File("empty.db");
  ASSERT_EQ(Fusetune({"bench", "--suite", suite, "--db", empty}).exit_code, 0);
  Execute(empty, "DELETE FROM bench_cells; DELETE FROM runs");
  CommandResult r = Fusetune({"regress", "--suite", suite, "--baseline", "previous", "--commit", commit, "--db", empty});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("no bench run"), std::string::npos) << r.err;
  EXPECT_EQ(Count(empty, "SELECT COUNT(*) FROM runs"), 0);
  EXPECT_EQ(Count(empty, "SELECT COUNT(*) FROM regressions"), 0);
}

}  // namespace
}  // namespace fusetune
