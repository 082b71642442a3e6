// `fusetune bisect` and `bisect-step` on a synthetic git history the test builds itself: each
// commit holds a speed; its "build" is a small stand-in for that commit's fusetune (a script
// that speaks the bench-serve protocol and answers blocks at that speed, with noise), so the
// search, the skips, the confirmation and the build reuse run in seconds.
#include <sqlite3.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "gtest/gtest.h"

namespace fusetune {
namespace {

using testing::CommandResult;
using testing::ReadFile;
using testing::RunCommand;
using testing::TempDir;

constexpr char kCell[] = "prefill/b1/hq1/hkv1/q32/k32/d32/causal0/fp32 fused/bm16/bs16/t1/fp32/st1";

CommandResult Bash(const std::string& script) { return RunCommand({"/bin/bash", "-c", script}, 300); }

CommandResult Fusetune(std::vector<std::string> args) {
  args.insert(args.begin(), FUSETUNE_BINARY);
  return RunCommand(args, 600);
}

// bench-serve at the speed in the file beside it: blocks of speed + U[0, 1) microseconds.
constexpr char kServe[] = R"(#!/bin/bash
speed=$(cat "$(dirname "$0")/speed")
echo '{"protocol":1,"commit":"synthetic","device":{"backend":"cpu","name":"synthetic","arch":"x"},"environment":""}'
while read -r line; do
  case "$line" in
    *'"op":"quit"'*) exit 0 ;;
    *'"op":"can_run"'*) echo '{"can_run":true,"why":""}' ;;
    *'"op":"verify"'*) echo '{"outcome":"ok","message":"","max_abs_error":0,"max_rel_error":1e-7,"tolerance":0.0001}' ;;
    *'"op":"block"'*) printf '{"block":[{"n":10,"us":%s.%02d,"u":false}]}\n' "$speed" $((RANDOM % 100)) ;;
    *) echo '{"error":"unknown request"}' ;;
  esac
done
)";

// Builds commit $1 of the repo: 125 when the commit holds a file `broken`; else a stand-in
// binary with that commit's speed, kept by commit (a second build of it is reused).
constexpr char kBuild[] = R"(#!/bin/bash
set -eu
commit=$1
out="$BUILDS/$commit"
if [[ -x "$out/bin/fusetune" ]]; then echo "$out/bin/fusetune"; exit 0; fi
if git -C "$REPO" cat-file -e "$commit:broken" 2>/dev/null; then echo "broken $commit" >> "$BUILDS/log"; exit 125; fi
mkdir -p "$out/bin"
git -C "$REPO" show "$commit:speed" > "$out/bin/speed"
cp "$SERVE" "$out/bin/fusetune"
chmod +x "$out/bin/fusetune"
echo "built $commit" >> "$BUILDS/log"
echo "$out/bin/fusetune"
)";

class BisectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    repo_ = dir_.File("repo");
    builds_ = dir_.File("builds");
    std::filesystem::create_directories(builds_);
    std::ofstream(dir_.File("serve.sh")) << kServe;
    std::ofstream(dir_.File("build.sh")) << kBuild;
    ASSERT_EQ(Bash("git init -q " + repo_ + " && cd " + repo_ +
                   " && git config user.email t@example.com && git config user.name t").exit_code, 0);
  }

  // Commits `speeds` in order (the first is the good endpoint); `broken` indexes do not build.
  std::vector<std::string> Commit(const std::vector<int>& speeds, const std::vector<int>& broken = {}) {
    std::vector<std::string> hashes;
    for (size_t i = 0; i < speeds.size(); ++i) {
      std::string script = "cd " + repo_ + " && echo " + std::to_string(speeds[i]) + " > speed && ";
      const bool is_broken = std::find(broken.begin(), broken.end(), static_cast<int>(i)) != broken.end();
      script += is_broken ? "touch broken && git add broken speed && " : "git rm -q --ignore-unmatch broken && git add speed && ";
      script += "git commit -q --allow-empty -m 'commit " + std::to_string(i) + "' && git rev-parse HEAD";
      CommandResult r = Bash(script);
      EXPECT_EQ(r.exit_code, 0) << r.err;
      hashes.push_back(r.out.substr(0, 40));
    }
    return hashes;
  }

  std::string BuildCommand() const {
    return "BUILDS=" + builds_ + " REPO=" + repo_ + " SERVE=" + dir_.File("serve.sh") + " bash " + dir_.File("build.sh") +
           " {commit}";
  }

  int Built() const {
    const std::string log = std::filesystem::exists(builds_ + "/log") ? ReadFile(builds_ + "/log") : "";
    int n = 0;
    for (size_t at = 0; (at = log.find("built ", at)) != std::string::npos; ++at) ++n;
    return n;
  }

  CommandResult RunBisect(const std::string& good, const std::string& bad, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"bisect", "--good", good, "--bad", bad, "--cell", kCell, "--repo", repo_,
                                     "--build-command", BuildCommand()};
    args.insert(args.end(), extra.begin(), extra.end());
    return Fusetune(args);
  }

  TempDir dir_;
  std::string repo_, builds_;
};

TEST_F(BisectTest, FindsThePlantedCommitInLog2Builds) {
  std::vector<int> speeds(34, 100);  // the good endpoint and 33 commits after it
  for (size_t i = 21; i < speeds.size(); ++i) speeds[i] = 110;
  const std::vector<std::string> c = Commit(speeds, /*broken=*/{16});
  CommandResult r = RunBisect(c[0], c.back());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("culprit " + c[21]), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("commit 21"), std::string::npos) << r.out;  // its subject
  const int n = 33;
  std::printf("%s\nbuilds: %d (bound %d)\n", r.out.c_str(), Built(), static_cast<int>(std::ceil(std::log2(n))) + 2);
  EXPECT_LE(Built(), static_cast<int>(std::ceil(std::log2(n))) + 2) << ReadFile(builds_ + "/log");
  // The commit that does not build was tried and skipped.
  EXPECT_NE(ReadFile(builds_ + "/log").find("broken " + c[16]), std::string::npos) << ReadFile(builds_ + "/log");
  EXPECT_NE(r.out.find("skip (does not build)"), std::string::npos) << r.out;
  // A second bisect reuses every build.
  const int before = Built();
  ASSERT_EQ(RunBisect(c[0], c.back()).exit_code, 0);
  EXPECT_EQ(Built(), before);
}

TEST_F(BisectTest, ANonMonotonicRangeEndsAtAConfirmedStep) {
  // Slow from commit 8, fast again from 16, slow again from 24.
  std::vector<int> speeds(34, 100);
  for (size_t i = 0; i < speeds.size(); ++i) speeds[i] = ((i >= 8 && i < 16) || i >= 24) ? 110 : 100;
  const std::vector<std::string> c = Commit(speeds);
  CommandResult r = RunBisect(c[0], c.back());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const bool at8 = r.out.find("culprit " + c[8]) != std::string::npos;
  const bool at24 = r.out.find("culprit " + c[24]) != std::string::npos;
  EXPECT_TRUE(at8 || at24) << r.out;
  EXPECT_NE(r.out.find("against its parent"), std::string::npos) << r.out;
}

TEST_F(BisectTest, ImprovementFindsTheCommitThatMadeItFaster) {
  std::vector<int> speeds(18, 120);
  for (size_t i = 5; i < speeds.size(); ++i) speeds[i] = 100;
  const std::vector<std::string> c = Commit(speeds);
  CommandResult r = RunBisect(c[0], c.back(), {"--improvement"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("culprit " + c[5]), std::string::npos) << r.out;
  // Without --improvement there is nothing to find.
  EXPECT_EQ(RunBisect(c[0], c.back()).exit_code, 2);
}

// The first column of the first row of `sql` (-1 when the query fails).
int64_t CountRows(const std::string& db, const std::string& sql) {
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

TEST_F(BisectTest, ACellOfTheDatabasesBenchRunsIsBisectedAndTheCulpritRecorded) {
  // The cell as a nightly's bench run stored it (the real binary on the CPU backend).
  const std::string db = dir_.File("nightly.db");
  const std::string suite = dir_.File("suite.json");
  const std::string problem = std::string(kCell).substr(0, std::string(kCell).find(' '));
  const std::string config = std::string(kCell).substr(std::string(kCell).find(' ') + 1);
  std::ofstream(suite) << R"({"name": "nightly", "blocks": 3, "block": {"warmup": 0, "repeats": 3, "max_seconds": 0.1, "flush_l2": false},
    "cells": [{"problem": ")" << problem << R"(", "config": ")" << config << R"(", "role": "best"}]})";
  CommandResult bench = Fusetune({"bench", "--suite", suite, "--db", db});
  ASSERT_EQ(bench.exit_code, 0) << bench.err << bench.out;
  std::vector<int> speeds(9, 100);
  for (size_t i = 6; i < speeds.size(); ++i) speeds[i] = 110;
  const std::vector<std::string> c = Commit(speeds);
  CommandResult r = RunBisect(c[0], c.back(), {"--db", db});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("culprit " + c[6]), std::string::npos) << r.out;
  EXPECT_EQ(CountRows(db, "SELECT COUNT(*) FROM regressions WHERE metric = 'bisect_culprit' AND commit_hash = '" +
                              c[6].substr(0, 12) + "'"),
            1);
  // A cell the database does not hold: exit 2, and the message lists what it holds.
  CommandResult unknown = Fusetune({"bisect", "--good", c[0], "--bad", c.back(), "--cell",
                                    problem + " fused/bm32/bs32/t1/fp32/st1", "--repo", repo_, "--build-command",
                                    BuildCommand(), "--db", db});
  EXPECT_EQ(unknown.exit_code, 2) << unknown.err;
  EXPECT_NE(unknown.err.find("holds no bench cell"), std::string::npos) << unknown.err;
  EXPECT_NE(unknown.err.find(config), std::string::npos) << unknown.err;
}

TEST_F(BisectTest, BadInputIsAClearErrorAndLeavesNoWorktree) {
  const std::vector<std::string> c = Commit({100, 100, 110});
  CommandResult swapped = RunBisect(c[2], c[0]);
  EXPECT_EQ(swapped.exit_code, 2);
  EXPECT_NE(swapped.err.find("not an ancestor"), std::string::npos) << swapped.err;
  CommandResult unknown = RunBisect("0123456789abcdef", c[2]);
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("unknown commit"), std::string::npos) << unknown.err;
  CommandResult no_cell = Fusetune({"bisect", "--good", c[0], "--bad", c[2], "--cell", kCell, "--repo", repo_,
                                    "--build-command", BuildCommand(), "--db", dir_.File("none.db")});
  EXPECT_EQ(no_cell.exit_code, 2) << no_cell.err;
  std::ofstream(repo_ + "/speed") << "999\n";  // a dirty worktree
  CommandResult dirty = RunBisect(c[0], c[2]);
  EXPECT_EQ(dirty.exit_code, 2);
  EXPECT_NE(dirty.err.find("uncommitted changes"), std::string::npos) << dirty.err;
  EXPECT_EQ(Built(), 0);  // nothing was built for any of them
  CommandResult worktrees = Bash("git -C " + repo_ + " worktree list | wc -l");
  EXPECT_EQ(worktrees.out, "1\n");
}

TEST_F(BisectTest, BisectStepDrivesGitBisectRun) {
  std::vector<int> speeds(20, 100);
  for (size_t i = 13; i < speeds.size(); ++i) speeds[i] = 110;
  const std::vector<std::string> c = Commit(speeds, /*broken=*/{9});
  CommandResult good = Bash(BuildCommand().replace(BuildCommand().find("{commit}"), 8, c[0]));
  ASSERT_EQ(good.exit_code, 0) << good.err;
  const std::string good_binary = good.out.substr(0, good.out.find('\n'));
  const std::string step = std::string(FUSETUNE_BINARY) + " bisect-step --good-binary '" + good_binary + "' --cell '" +
                           kCell + "' --repo . --build-command '" + BuildCommand() + "'";
  CommandResult r = Bash("cd " + repo_ + " && git bisect start " + c.back() + " " + c[0] + " >/dev/null && git bisect run " +
                         step + "; git bisect reset >/dev/null 2>&1");
  EXPECT_NE(r.out.find(c[13] + " is the first bad commit"), std::string::npos) << r.out << r.err;
}

}  // namespace
}  // namespace fusetune
