// The C ABI's database reads: a file written by the Store read back as JSON rows, and the
// read-only open's refusals (no file, not a database), with nothing created or changed.
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "fusetune/c_api.h"
#include "nlohmann/json.hpp"
#include "test_util.h"  // db/src: ScopedTempDir, TestRun, TestTrial, RawQuery

namespace {

using fusetune::db_test::ScopedTempDir;
using nlohmann::json;

// A fusetune_db_* read's rows, parsed; a failed read is a test failure (and an empty array).
template <typename Read>
json Rows(Read read) {
  char* text = nullptr;
  char err[512] = "";
  const int rc = read(&text, err, sizeof err);
  EXPECT_EQ(rc, FUSETUNE_OK) << fusetune_status_name(rc) << ": " << err;
  if (rc != FUSETUNE_OK) return json::array();
  json rows = json::parse(text);
  fusetune_free_text(text);
  return rows;
}

// One run with two trials (one failed with a NaN error), a best config, a regression and an audit.
void WriteDatabase(const std::string& path) {
  auto store = fusetune::db_test::OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  auto run = store->BeginRun(fusetune::db_test::TestRun());
  ASSERT_TRUE(run.ok()) << run.status();
  const std::string problem = "prefill/b1/hq2/hkv2/q8/k8/d64/causal0/fp32";
  fusetune::Trial timed = fusetune::db_test::TestTrial(*run, problem, "fused/bm64/bs64/t1/fp32/st1");
  // Two blocks: one timed as a CUDA graph, one launch by launch.
  timed.blocks.resize(2);
  for (fusetune::SampleBlock& b : timed.blocks) {
    b.samples = 3;
    b.median_us = 10.5;
  }
  timed.blocks[0].graphed = true;
  ASSERT_TRUE(store->RecordTrial(timed).ok());
  fusetune::Trial failed = fusetune::db_test::TestTrial(*run, problem, "fused/bm16/bs16/t1/fp32/st1");
  failed.outcome = fusetune::TrialOutcome::kVerifyFailed;
  failed.message = "max error nan";
  failed.samples_us.clear();
  failed.max_abs_error = std::numeric_limits<double>::quiet_NaN();
  failed.max_rel_error = std::numeric_limits<double>::infinity();
  ASSERT_TRUE(store->RecordTrial(failed).ok());
  fusetune::BestConfig best;
  best.device_class = "cpu/Test-CPU/x86_64-avx2";
  best.problem_key = problem;
  best.config_key = "fused/bm64/bs64/t1/fp32/st1";
  best.median_us = 10.5;
  best.speedup_vs_materialized = 2.5;
  best.run_id = *run;
  best.commit = "abc123";
  ASSERT_TRUE(store->UpsertBestConfig(best).ok());
  fusetune::Regression r;
  r.commit = "def456";
  r.baseline_commit = "abc123";
  r.device_class = best.device_class;
  r.problem_key = problem;
  r.config_key = best.config_key;
  r.metric = "latency";
  r.ratio = 1.2;
  r.p_value = 0.001;
  r.verdict = "regressed";
  ASSERT_TRUE(store->RecordRegression(r).ok());
  fusetune::AuditSummary a;
  a.run_id = *run;
  a.device_class = best.device_class;
  a.problem_key = problem;
  a.recorded_config_key = a.best_config_key = best.config_key;
  a.recorded_us = a.best_us = 10.5;
  a.regret_low = -0.1;
  a.rounds = 15;
  a.configs_measured = 2;
  a.commit = "abc123";
  ASSERT_TRUE(store->RecordAudit(a).ok());
}

TEST(StoreApi, ReadsEveryKindOfRowAsJson) {
  ScopedTempDir dir;
  const std::string path = dir.File("fusetune.db");
  WriteDatabase(path);
  fusetune_db* db = nullptr;
  char err[512] = "";
  ASSERT_EQ(fusetune_db_open(path.c_str(), &db, err, sizeof err), FUSETUNE_OK) << err;

  const json best = Rows([&](char** t, char* e, size_t n) { return fusetune_db_best_configs(db, nullptr, t, e, n); });
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0]["config_key"], "fused/bm64/bs64/t1/fp32/st1");
  EXPECT_EQ(best[0]["median_us"], 10.5);
  EXPECT_EQ(best[0]["speedup_vs_materialized"], 2.5);
  EXPECT_EQ(Rows([&](char** t, char* e, size_t n) { return fusetune_db_best_configs(db, "cuda/x/sm90", t, e, n); })
                .size(),
            0u);

  const json trials = Rows([&](char** t, char* e, size_t n) { return fusetune_db_trials(db, 1, "", "", 0, t, e, n); });
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[0]["outcome"], "ok");
  EXPECT_EQ(trials[0]["samples_us"], json({10.5, 11.25, 9.75}));
  EXPECT_EQ(trials[0]["stage"], "screen");
  ASSERT_EQ(trials[0]["blocks"].size(), 2u);
  EXPECT_EQ(trials[0]["blocks"][0]["graphed"], true);
  EXPECT_EQ(trials[0]["blocks"][1]["graphed"], false);
  EXPECT_EQ(trials[1]["outcome"], "verify_failed");
  EXPECT_EQ(trials[1]["max_abs_error"], "nan");  // SQLite keeps NaN as NULL, read back as NaN
  EXPECT_EQ(trials[1]["max_rel_error"], "inf");
  const json by_problem = Rows([&](char** t, char* e, size_t n) {
    return fusetune_db_trials(db, 0, "cpu/Test-CPU/x86_64-avx2", "prefill/b1/hq2/hkv2/q8/k8/d64/causal0/fp32", 10, t,
                              e, n);
  });
  EXPECT_EQ(by_problem.size(), 2u);
  char* text = nullptr;
  EXPECT_EQ(fusetune_db_trials(db, 0, "", "", 10, &text, err, sizeof err), FUSETUNE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("run_id"), std::string::npos) << err;
  EXPECT_EQ(text, nullptr);

  const json regressions =
      Rows([&](char** t, char* e, size_t n) { return fusetune_db_regressions(db, nullptr, 100, t, e, n); });
  ASSERT_EQ(regressions.size(), 1u);
  EXPECT_EQ(regressions[0]["verdict"], "regressed");
  EXPECT_EQ(regressions[0]["ratio"], 1.2);
  const json audits =
      Rows([&](char** t, char* e, size_t n) { return fusetune_db_audits(db, nullptr, nullptr, 100, t, e, n); });
  ASSERT_EQ(audits.size(), 1u);
  EXPECT_EQ(audits[0]["rounds"], 15);
  EXPECT_EQ(audits[0]["regret_low"], -0.1);
  fusetune_db_close(db);
  fusetune_db_close(nullptr);
}

TEST(StoreApi, AMissingFileIsNotFoundAndNothingIsCreated) {
  ScopedTempDir dir;
  const std::string path = dir.File("typo.db");
  fusetune_db* db = reinterpret_cast<fusetune_db*>(1);
  char err[512] = "";
  EXPECT_EQ(fusetune_db_open(path.c_str(), &db, err, sizeof err), FUSETUNE_NOT_FOUND);
  EXPECT_EQ(db, nullptr);
  EXPECT_NE(std::string(err).find(path), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(StoreApi, AFileThatIsNotADatabaseIsRefusedNamingIt) {
  ScopedTempDir dir;
  const std::string path = dir.File("notes.txt");
  std::ofstream(path) << "these are not the rows you are looking for, padded past one SQLite header: "
                      << std::string(200, '.');
  fusetune_db* db = nullptr;
  char err[512] = "";
  const int rc = fusetune_db_open(path.c_str(), &db, err, sizeof err);
  EXPECT_EQ(rc, FUSETUNE_DATA_LOSS) << fusetune_status_name(rc) << ": " << err;
  EXPECT_NE(std::string(err).find(path), std::string::npos) << err;
  EXPECT_EQ(db, nullptr);
}

TEST(StoreApi, AnOlderSchemaIsRefusedAndNotUpgraded) {
  ScopedTempDir dir;
  const std::string path = dir.File("old.db");
  WriteDatabase(path);
  ASSERT_EQ(fusetune::db_test::RawQuery(path, "PRAGMA user_version = 4"), "");
  fusetune_db* db = nullptr;
  char err[512] = "";
  EXPECT_EQ(fusetune_db_open(path.c_str(), &db, err, sizeof err), FUSETUNE_FAILED_PRECONDITION);
  EXPECT_NE(std::string(err).find("older"), std::string::npos) << err;
  EXPECT_EQ(fusetune::db_test::RawQuery(path, "PRAGMA user_version"), "4");
}

}  // namespace
