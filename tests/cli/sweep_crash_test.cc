// A `fusetune sweep` SIGKILLed midway leaves a valid database that loses no committed trial,
// and the same command resumes the same run to completion, duplicating nothing. Ctrl-C and a
// spent time budget stop a trial in flight, however long its launch; a problem too large for
// the host is refused before anything is measured.
#include <signal.h>
#include <unistd.h>
#include <sqlite3.h>

#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "common/subprocess.h"
#include "fusetune/db/store.h"
#include "fusetune/kernels/backend.h"
#include "gtest/gtest.h"

namespace fusetune {
namespace {

using testing::RunCommand;
using testing::Subprocess;
using testing::TempDir;

const char* kCommit = "crash-test";
const char* kLabel = "crash";

std::vector<std::string> SweepArgs(const std::string& db, const std::string& label = kLabel) {
  // 3 problems x 3 variants x 4 trials; each trial a few tens of ms on the CPU, so the kill
  // lands while the sweep is running.
  return {FUSETUNE_BINARY, "sweep", "--db", db, "--seq", "256,384,512", "--heads", "4", "--head-dim", "64",
          "--max-trials", "4", "--max-seconds", "0", "--repeats", "5", "--commit", kCommit, "--label", label};
}

std::string DeviceClass() {
  absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend("cpu");
  return cpu.ok() ? (*cpu)->Describe().DeviceClass() : "?";
}

std::string IntegrityCheck(const std::string& path) {
  sqlite3* db = nullptr;
  std::string result = "open failed";
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      result = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return result;
}

// Trials of the unfinished run (empty while the run does not exist yet).
std::vector<Trial> UnfinishedRunTrials(const std::string& db, int64_t* run_id) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(db);
  if (!store.ok()) return {};
  absl::StatusOr<RunInfo> run = (*store)->FindUnfinishedRun(kCommit, DeviceClass(), kLabel);
  if (!run.ok()) return {};
  *run_id = run->run_id;
  absl::StatusOr<std::vector<Trial>> trials = (*store)->ListTrials(run->run_id);
  return trials.ok() ? *trials : std::vector<Trial>{};
}

// The screen cells (problem, config): the search's, fixed by the seed. The final rounds'
// contenders depend on the measured times, so their trials are checked apart.
std::set<std::pair<std::string, std::string>> Cells(const std::vector<Trial>& trials) {
  std::set<std::pair<std::string, std::string>> out;
  for (const Trial& t : trials) {
    if (t.stage == TrialStage::kScreen) out.insert({t.problem_key, t.config_key});
  }
  return out;
}

size_t ScreenTrials(const std::vector<Trial>& trials) {
  size_t n = 0;
  for (const Trial& t : trials) n += t.stage == TrialStage::kScreen;
  return n;
}

// Problems with at least one whole set of final rounds: every trial of the set has the
// same number of rounds.
std::set<std::string> ProblemsWithFinalRounds(const std::vector<Trial>& trials) {
  std::map<std::pair<std::string, int>, std::set<size_t>> rounds;
  for (const Trial& t : trials) {
    if (t.stage == TrialStage::kFinal) rounds[{t.problem_key, t.attempt}].insert(t.samples_us.size());
  }
  std::set<std::string> out;
  for (const auto& [key, counts] : rounds) {
    if (counts.size() == 1) out.insert(key.first);
  }
  return out;
}

TEST(SweepCrash, KilledSweepLosesNothingAndResumesTheSameRun) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string db = dir.File("crash.db");

  // 1. Start the sweep and SIGKILL it once a few trials are committed.
  int64_t run_id = 0;
  std::vector<Trial> before_kill;
  {
    Subprocess sweep(SweepArgs(db), dir.path());
    ASSERT_TRUE(sweep.started());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      if (sweep.Poll().has_value()) break;
      if (UnfinishedRunTrials(db, &run_id).size() >= 5) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_FALSE(sweep.Poll().has_value())
        << "the sweep ended before it could be killed midway; stdout:\n" << sweep.Stdout() << sweep.Stderr();
    sweep.Signal(SIGKILL);
    ASSERT_EQ(sweep.Wait(30).value_or(-1), 128 + SIGKILL);
  }
  // 2. The database is valid and holds every trial committed before the kill.
  EXPECT_EQ(IntegrityCheck(db), "ok");
  before_kill = UnfinishedRunTrials(db, &run_id);
  ASSERT_GE(before_kill.size(), 5u);
  ASSERT_LT(before_kill.size(), 36u) << "killed midway";
  EXPECT_EQ(Cells(before_kill).size(), ScreenTrials(before_kill)) << "no duplicate (problem, config)";

  // 3. The same command resumes the same run and completes it.
  testing::CommandResult resumed = RunCommand(SweepArgs(db), 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("resuming run " + std::to_string(run_id)), std::string::npos) << resumed.out;
  EXPECT_EQ(IntegrityCheck(db), "ok");

  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(db);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE(absl::IsNotFound((*store)->FindUnfinishedRun(kCommit, DeviceClass(), kLabel).status()))
      << "the resumed run is finished";
  absl::StatusOr<RunInfo> run = (*store)->GetRun(run_id);
  ASSERT_TRUE(run.ok());
  EXPECT_GT(run->finished_unix_ms, 0);
  absl::StatusOr<std::vector<Trial>> after = (*store)->ListTrials(run_id);
  ASSERT_TRUE(after.ok());

  // No trial lost: every trial committed before the kill is still there, unchanged.
  std::map<std::string, Trial> by_id;
  for (const Trial& t : *after) by_id[t.trial_id] = t;
  EXPECT_EQ(by_id.size(), after->size()) << "no duplicate trial ids";
  for (const Trial& t : before_kill) {
    auto it = by_id.find(t.trial_id);
    ASSERT_NE(it, by_id.end()) << "lost " << t.problem_key << " " << t.config_key;
    EXPECT_EQ(it->second.outcome, t.outcome);
    EXPECT_EQ(it->second.median_us, t.median_us);
  }
  // Nothing duplicated, nothing missing: the same cells as an uninterrupted sweep.
  const std::string clean_db = dir.File("clean.db");
  testing::CommandResult clean = RunCommand(SweepArgs(clean_db), 300);
  ASSERT_EQ(clean.exit_code, 0) << clean.out << clean.err;
  absl::StatusOr<std::unique_ptr<Store>> clean_store = Store::Open(clean_db);
  ASSERT_TRUE(clean_store.ok());
  absl::StatusOr<RunInfo> clean_run = (*clean_store)->GetRun(1);
  ASSERT_TRUE(clean_run.ok());
  absl::StatusOr<std::vector<Trial>> clean_trials = (*clean_store)->ListTrials(clean_run->run_id);
  ASSERT_TRUE(clean_trials.ok());
  EXPECT_EQ(Cells(*after), Cells(*clean_trials));
  EXPECT_EQ(ScreenTrials(*after), ScreenTrials(*clean_trials));
  EXPECT_EQ(ProblemsWithFinalRounds(*after).size(), 3u) << "every problem's final rounds, whole";

  // Best configs of every problem, from the resumed run.
  absl::StatusOr<std::vector<BestConfig>> best = (*store)->ListBestConfigs(DeviceClass());
  ASSERT_TRUE(best.ok());
  std::set<std::string> problems;
  for (const BestConfig& b : *best) {
    problems.insert(b.problem_key);
    EXPECT_EQ(b.run_id, run_id);
    EXPECT_GT(b.median_us, 0);
  }
  EXPECT_EQ(problems.size(), 3u);
}

TEST(SweepCrash, SigtermStopsBetweenTrialsAndTheRunResumes) {
  TempDir dir;
  const std::string db = dir.File("term.db");
  int64_t run_id = 0;
  {
    Subprocess sweep(SweepArgs(db), dir.path());
    ASSERT_TRUE(sweep.started());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline && !sweep.Poll().has_value() &&
           UnfinishedRunTrials(db, &run_id).size() < 3) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_FALSE(sweep.Poll().has_value()) << sweep.Stdout() << sweep.Stderr();
    sweep.Signal(SIGTERM);
    EXPECT_EQ(sweep.Wait(60).value_or(-1), 4) << "exit code 4: cancelled, resumable\n" << sweep.Stdout();
    EXPECT_NE(sweep.Stdout().find("resume"), std::string::npos) << sweep.Stdout();
  }
  EXPECT_EQ(IntegrityCheck(db), "ok");
  const size_t recorded = UnfinishedRunTrials(db, &run_id).size();
  EXPECT_GE(recorded, 3u);
  testing::CommandResult resumed = RunCommand(SweepArgs(db), 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("resuming run " + std::to_string(run_id) + " (" + std::to_string(recorded) + " trials"),
            std::string::npos)
      << resumed.out;
}

// One launch of this problem takes minutes on a few cores (a 65536-token prefill, one head).
std::vector<std::string> LongTrialArgs(const std::string& db, const std::string& max_seconds) {
  return {FUSETUNE_BINARY, "sweep", "--db", db, "--seq", "65536", "--heads", "1", "--max-seconds", max_seconds,
          "--commit", kCommit, "--label", kLabel, "--progress", "always", "--progress-seconds", "0.5"};
}

// The trials of the first run of a fresh database (run 1), whatever its state.
std::vector<Trial> FirstRunTrials(const std::string& db) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(db);
  if (!store.ok()) return {};
  absl::StatusOr<std::vector<Trial>> trials = (*store)->ListTrials(1);
  return trials.ok() ? *trials : std::vector<Trial>{};
}

TEST(SweepInterrupt, CtrlCDuringALongLaunchStopsTheSweepAndRecordsTheTrialInterrupted) {
  TempDir dir;
  const std::string db = dir.File("long.db");
  Subprocess sweep(LongTrialArgs(db, "600"), dir.path());
  ASSERT_TRUE(sweep.started());
  // The progress line names the config being screened once its trial is under way.
  ASSERT_TRUE(testing::WaitFor([&] { return sweep.Stderr().find("now fused/") != std::string::npos || sweep.Poll(); },
                               120))
      << sweep.Stdout() << sweep.Stderr();
  ASSERT_FALSE(sweep.Poll().has_value()) << sweep.Stdout() << sweep.Stderr();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  sweep.Signal(SIGINT);
  // A launch of minutes is stopped between tiles: the sweep ends long before the launch would.
  EXPECT_EQ(sweep.Wait(90).value_or(-1), 4) << "exit code 4: cancelled\n" << sweep.Stdout() << sweep.Stderr();
  EXPECT_NE(sweep.Stdout().find("stopped by a signal"), std::string::npos) << sweep.Stdout();
  EXPECT_EQ(sweep.Stdout().find("done:"), std::string::npos) << sweep.Stdout();
  const std::vector<Trial> trials = FirstRunTrials(db);
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0].outcome, TrialOutcome::kInterrupted);
  EXPECT_NE(trials[0].message.find("signal"), std::string::npos) << trials[0].message;
}

TEST(SweepInterrupt, ABudgetSpentInsideALongLaunchEndsTheProblemAndTheOutputSaysIncomplete) {
  TempDir dir;
  const std::string db = dir.File("budget.db");
  // 3 s of budget against a launch of minutes: before the budget held inside trials, this ran
  // until the launch ended.
  testing::CommandResult r = RunCommand(LongTrialArgs(db, "3"), 90);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("no successful trial (1 interrupted)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("INCOMPLETE: the time budget (3 s) ran out inside a trial"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 problem(s) INCOMPLETE"), std::string::npos) << r.out;
  const std::vector<Trial> trials = FirstRunTrials(db);
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0].outcome, TrialOutcome::kInterrupted);
  EXPECT_NE(trials[0].message.find("time budget"), std::string::npos) << trials[0].message;
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(db);
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE(absl::IsNotFound((*store)->GetBestConfig(DeviceClass(), trials[0].problem_key).status()))
      << "no best config from a search that measured nothing";
}

TEST(SweepInterrupt, AProblemTooLargeForTheHostIsRefusedWithTheBytesItNeeds) {
  TempDir dir;
  const std::string db = dir.File("large.db");
  // A 4 GB address-space limit, as `prlimit --as` or a container gives.
  testing::CommandResult r =
      RunCommand({"/bin/sh", "-c", std::string("ulimit -v 4000000 && exec ") + FUSETUNE_BINARY +
                                       " sweep --seq 1048576 --db " + db});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("needs about"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("GiB of host memory"), std::string::npos) << r.err;
  EXPECT_NE(access(db.c_str(), F_OK), 0) << "refused before the database is touched";
}

TEST(SweepInterrupt, NoProgressLinesWhenStderrIsNotATerminalUnlessAsked) {
  TempDir dir;
  testing::CommandResult quiet = RunCommand({FUSETUNE_BINARY, "sweep", "--db", dir.File("q.db"), "--seq", "64",
                                             "--heads", "2", "--max-trials", "1", "--final-rounds", "0"});
  ASSERT_EQ(quiet.exit_code, 0) << quiet.out << quiet.err;
  EXPECT_EQ(quiet.err.find("..."), std::string::npos) << quiet.err;
  testing::CommandResult asked = RunCommand({FUSETUNE_BINARY, "sweep", "--db", dir.File("a.db"), "--seq", "64",
                                             "--heads", "2", "--max-trials", "1", "--final-rounds", "0", "--progress",
                                             "always"});
  ASSERT_EQ(asked.exit_code, 0) << asked.out << asked.err;
  EXPECT_NE(asked.err.find("... [1/1] prefill/"), std::string::npos) << asked.err;
  EXPECT_NE(asked.err.find("screening fused configs: 0 of"), std::string::npos) << asked.err;
}

}  // namespace
}  // namespace fusetune
