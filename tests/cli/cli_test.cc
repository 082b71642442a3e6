// The fusetune command line: usage errors exit 2 without side effects, --help works for every
// command, report --json carries the documented field names, and the reading commands work
// on a database they cannot write (a read-only mount, another user's directory).
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/read_only_dir.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace fusetune {
namespace {

using testing::CommandResult;
using testing::ReadFile;
using testing::ReadOnlyView;
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
      {"sweep", "--db", db, "--kind", "decode", "--cache-len", "128", "--page-size", "300"},
      {"sweep", "--db", db, "--kind", "decode", "--cache-len", "128", "--new-tokens", "17"},
      {"sweep", "--db", db, "--kind", "decode", "--cache-lens", "64,-1"},
      {"sweep", "--db", db, "--preset", "decode", "--shared-prefix-pages", "2"},
      {"sweep", "--db", db, "--seq", "128", "--commit", "two words"},
      {"sweep", "--db", db, "--seq", "128", "--commit", "abcdef1"},  // an abbreviation of nothing stored
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
  for (const char* command : {"sweep", "best", "report", "bench", "audit"}) {
    CommandResult r = Fusetune({command, "--help"});
    EXPECT_EQ(r.exit_code, 0) << command;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << command << ": " << r.out;
    EXPECT_NE(r.out.find("--"), std::string::npos) << command;
  }
  CommandResult top = Fusetune({"--help"});
  EXPECT_EQ(top.exit_code, 0);
  for (const char* command : {"sweep", "best", "report", "bench", "audit"}) {
    EXPECT_NE(top.out.find(command), std::string::npos) << command;
  }
  EXPECT_NE(top.out.find("Exit codes"), std::string::npos);
}

TEST(Cli, ReadingCommandsOnAMissingDatabaseFailWithoutCreatingIt) {
  TempDir dir;
  const std::string db = dir.File("missing.db");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"report", "--db", db}, {"report", "--db", db, "--json"},
        {"best", "--db", db, "--seq", "64", "--heads", "2", "--head-dim", "32"}}) {
    CommandResult r = Fusetune(args);
    EXPECT_EQ(r.exit_code, 1) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find("no database at " + db), std::string::npos) << args[0] << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(db)) << args[0] << " created the database";
    EXPECT_FALSE(std::filesystem::exists(db + "-wal")) << args[0];
  }
}

// Every command taking --db: an empty path is a usage error (SQLite would otherwise open a
// private temporary database and a sweep's results would vanish).
TEST(Cli, EmptyDatabasePathIsAUsageError) {
  std::vector<std::vector<std::string>> cases = {
      {"sweep", "--db", "", "--seq", "48", "--heads", "2", "--head-dim", "32", "--max-trials", "1"},
      {"best", "--db", "", "--seq", "64", "--heads", "2", "--head-dim", "32"},
      {"report", "--db", ""},
      {"report", "--db="},
  };
  if (Fusetune({"--help"}).out.find("serve") != std::string::npos) {
    cases.push_back({"serve", "--db", "", "--listen", "127.0.0.1:0", "--metrics", "off"});
  }
  for (const auto& args : cases) {
    CommandResult r = Fusetune(args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << "\nstdout: " << r.out << "\nstderr: " << r.err;
    EXPECT_NE(r.err.find("--db"), std::string::npos) << args[0] << ": the error names the flag: " << r.err;
  }
}

// A file that is not a fusetune database: every command names the file and says what is
// wrong, without SQL text, and leaves the file as it was.
TEST(Cli, ANonDatabaseFileIsNamedInTheErrorWithoutSql) {
  TempDir dir;
  const std::string db = dir.File("notes.db");
  const std::string content(4096, 'x');
  std::ofstream(db) << content;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"report", "--db", db},
        {"best", "--db", db, "--seq", "64", "--heads", "2", "--head-dim", "32"},
        {"sweep", "--db", db, "--seq", "48", "--heads", "2", "--head-dim", "32", "--max-trials", "1"}}) {
    CommandResult r = Fusetune(args);
    EXPECT_EQ(r.exit_code, 1) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find(db), std::string::npos) << args[0] << ": the error names the file: " << r.err;
    EXPECT_NE(r.err.find("not a fusetune database"), std::string::npos) << args[0] << ": " << r.err;
    for (const char* sql : {"SELECT", "PRAGMA", "INSERT", "BEGIN", "executing", "preparing"}) {
      EXPECT_EQ(r.err.find(sql), std::string::npos) << args[0] << ": SQL in the message: " << r.err;
    }
    EXPECT_EQ(ReadFile(db), content) << args[0] << " changed the file";
  }
}

// report and best on a database in a directory this process cannot write (so SQLite cannot
// create the -wal/-shm files next to it) answer exactly as on a writable copy.
TEST(Cli, ReportAndBestReadADatabaseInAReadOnlyDirectory) {
  TempDir dir;
  const std::string shared = dir.File("shared");
  const std::string copy = dir.File("copy");
  std::filesystem::create_directory(shared);
  std::filesystem::create_directory(copy);
  CommandResult sweep = Fusetune({"sweep", "--db", shared + "/fusetune.db", "--seq", "48,64", "--heads", "2",
                                  "--head-dim", "32", "--max-trials", "2", "--repeats", "3"});
  ASSERT_EQ(sweep.exit_code, 0) << sweep.out << sweep.err;
  // A finished sweep leaves the database alone in its directory: no WAL left to replay.
  ASSERT_FALSE(std::filesystem::exists(shared + "/fusetune.db-wal"));
  std::filesystem::copy_file(shared + "/fusetune.db", copy + "/fusetune.db");

  ReadOnlyView view(shared);
  if (!view.ok()) GTEST_SKIP() << "cannot make a read-only directory: " << view.unavailable_reason();
  const std::string read_only_db = view.path() + "/fusetune.db";
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"report", "--json"}, std::vector<std::string>{"report"},
        std::vector<std::string>{"best", "--seq", "64", "--heads", "2", "--head-dim", "32", "--json"}}) {
    auto args_for = [&](const std::string& db) {
      std::vector<std::string> args = command;
      args.insert(args.begin() + 1, {"--db", db});
      return args;
    };
    CommandResult read_only = Fusetune(args_for(read_only_db));
    CommandResult writable = Fusetune(args_for(copy + "/fusetune.db"));
    ASSERT_EQ(writable.exit_code, 0) << writable.err;
    EXPECT_EQ(read_only.exit_code, 0) << view.mechanism() << ": " << read_only.err;
    EXPECT_EQ(read_only.out, writable.out) << command[0];
    EXPECT_FALSE(read_only.out.empty());
  }
  EXPECT_FALSE(std::filesystem::exists(read_only_db + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(read_only_db + "-shm"));
}

// The same for a directory of another user (mode 0555, owned by root) read by an unprivileged
// user: SQLite used to fail with "attempt to write a readonly database" there. Needs root to
// switch users (setpriv); as another user, the test above already runs with mode 0555.
TEST(Cli, ReportAndBestReadAnotherUsersDirectory) {
  const char* setpriv = "/usr/bin/setpriv";
  if (::geteuid() != 0) GTEST_SKIP() << "not root: ReportAndBestReadADatabaseInAReadOnlyDirectory covers mode 0555";
  if (::access(setpriv, X_OK) != 0) GTEST_SKIP() << "no " << setpriv << " to run as another user";
  TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);  // mkdtemp makes it 0700
  const std::string shared = dir.File("shared");
  std::filesystem::create_directory(shared);
  const std::string db = shared + "/fusetune.db";
  CommandResult sweep = Fusetune({"sweep", "--db", db, "--seq", "48", "--heads", "2", "--head-dim", "32",
                                  "--max-trials", "2", "--repeats", "3"});
  ASSERT_EQ(sweep.exit_code, 0) << sweep.out << sweep.err;
  ASSERT_EQ(::chmod(db.c_str(), 0644), 0);
  ASSERT_EQ(::chmod(shared.c_str(), 0555), 0);
  const std::vector<std::string> as_nobody = {setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
                                              FUSETUNE_BINARY};
  std::vector<std::string> version = as_nobody;
  version.push_back("--version");
  CommandResult probe = RunCommand(version);
  if (probe.exit_code != 0) GTEST_SKIP() << "cannot run " << FUSETUNE_BINARY << " as uid 65534: " << probe.err;
  const std::vector<std::vector<std::string>> commands = {
      {"report", "--json", "--db", db},
      {"best", "--seq", "48", "--heads", "2", "--head-dim", "32", "--json", "--db", db}};
  std::vector<CommandResult> other_user;
  for (const std::vector<std::string>& command : commands) {
    std::vector<std::string> args = as_nobody;
    args.insert(args.end(), command.begin(), command.end());
    other_user.push_back(RunCommand(args, 300));
    EXPECT_EQ(other_user.back().exit_code, 0) << command[0] << ": " << other_user.back().err;
  }
  EXPECT_FALSE(std::filesystem::exists(db + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(db + "-shm"));
  for (size_t i = 0; i < commands.size(); ++i) {
    CommandResult owner = Fusetune(commands[i]);
    ASSERT_EQ(owner.exit_code, 0) << owner.err;
    EXPECT_EQ(other_user[i].out, owner.out) << commands[i][0];
    EXPECT_FALSE(owner.out.empty());
  }
  ::chmod(shared.c_str(), 0755);  // so that TempDir can remove it
}

TEST(Cli, ASweepsCommitIsStoredInCanonicalFormAndAnAbbreviationOfItResumes) {
  TempDir dir;
  const std::string db = dir.File("c.db");
  const std::vector<std::string> sweep = {"sweep", "--db", db, "--seq", "48", "--heads", "2", "--head-dim", "32",
                                          "--max-trials", "1", "--repeats", "3"};
  std::vector<std::string> full = sweep;
  full.insert(full.end(), {"--commit", "ABCDEF1234567890ABCDEF1234567890ABCDEF12"});
  CommandResult first = Fusetune(full);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.out.find("commit abcdef123456,"), std::string::npos) << first.out;
  std::vector<std::string> abbreviated = sweep;
  abbreviated.insert(abbreviated.end(), {"--commit", "abcdef1"});
  CommandResult second = Fusetune(abbreviated);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(second.out.find("commit abcdef123456,"), std::string::npos) << second.out;
  std::vector<std::string> unknown = sweep;
  unknown.insert(unknown.end(), {"--commit", "fedcba9"});
  CommandResult third = Fusetune(unknown);
  EXPECT_EQ(third.exit_code, 2) << third.out;
  EXPECT_NE(third.err.find("give at least 12 hex digits"), std::string::npos) << third.err;
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
  // best --json prints the same form as each report row, less the row's audit (and, for K/V
  // stored as e4m3, its unquantised_rel_error).
  for (const auto& row : rows) {
    if (row["problem"] != b["problem"]) continue;
    nlohmann::json without_audit = row;
    without_audit.erase("audit");
    EXPECT_EQ(b, without_audit) << best.out;
  }

  CommandResult missing = Fusetune({"best", "--db", db, "--seq", "80", "--heads", "2", "--head-dim", "32"});
  EXPECT_EQ(missing.exit_code, 3) << missing.err;
}

TEST(Cli, SweepOfAnE4m3CacheReportsTheErrorAgainstTheUnquantisedReference) {
  TempDir dir;
  const std::string db = dir.File("e4m3.db");
  CommandResult sweep = Fusetune({"sweep", "--db", db, "--kind", "decode", "--cache-len", "77", "--batch", "2",
                                  "--heads", "4", "--kv-heads", "2", "--head-dim", "32", "--dtype", "bf16",
                                  "--page-size", "16", "--kv-storage", "e4m3", "--variants", "fused",
                                  "--max-trials", "2", "--repeats", "3"});
  ASSERT_EQ(sweep.exit_code, 0) << sweep.out << sweep.err;
  CommandResult report = Fusetune({"report", "--db", db, "--json"});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  nlohmann::json rows = nlohmann::json::parse(report.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(rows.is_array() && rows.size() == 1u) << report.out;
  EXPECT_EQ(rows[0]["problem"], "decode/b2/hq4/hkv2/q1/k77/d32/causal0/bf16/page16/kve4m3");
  ASSERT_TRUE(rows[0].contains("unquantised_rel_error")) << report.out;
  // What the format costs is far above the kernel's own error and far below the output.
  EXPECT_GT(rows[0]["unquantised_rel_error"].get<double>(), rows[0]["max_rel_error"].get<double>());
  EXPECT_LT(rows[0]["unquantised_rel_error"].get<double>(), 0.2);
  CommandResult table = Fusetune({"report", "--db", db});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("(vs unquantised "), std::string::npos) << table.out;
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

TEST(Cli, BenchDecodeAgainstPerSequenceCacheLengthsReportsKvBandwidth) {
  CommandResult r = Fusetune({"bench", "--kind", "decode", "--cache-lens", "70,33", "--new-tokens", "3", "--heads",
                              "4", "--kv-heads", "2", "--head-dim", "32", "--causal", "--repeats", "3",
                              "--variants", "fused", "--block-m", "16", "--block-s", "16", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json rows = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(rows.is_array()) << r.out;
  ASSERT_EQ(rows.size(), 1u) << r.out;
  EXPECT_EQ(rows[0]["outcome"], "ok") << rows[0].dump();
  EXPECT_GT(rows[0]["kv_gbps"].get<double>(), 0);
  EXPECT_EQ(rows[0]["problem"].get<std::string>().rfind("decode/b2/hq4/hkv2/q3/k70/d32/causal1/fp32/kvpad-", 0), 0u)
      << rows[0].dump();
}

TEST(Cli, BenchOfAnE4m3CacheShowsTheErrorAgainstTheUnquantisedReference) {
  const std::vector<std::string> args = {"bench", "--kind", "decode", "--cache-len", "70", "--heads", "4",
                                         "--kv-heads", "2", "--head-dim", "32", "--dtype", "fp16", "--kv-storage",
                                         "e4m3", "--repeats", "3", "--variants", "fused", "--block-m", "16",
                                         "--block-s", "16"};
  std::vector<std::string> json = args;
  json.push_back("--json");
  CommandResult r = Fusetune(json);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json rows = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(rows.is_array() && !rows.empty()) << r.out;
  EXPECT_EQ(rows[0]["outcome"], "ok") << rows[0].dump();
  EXPECT_GT(rows[0]["unquantised_rel_error"].get<double>(), rows[0]["max_rel_error"].get<double>()) << rows[0].dump();
  CommandResult table = Fusetune(args);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("(vs unquantised "), std::string::npos) << table.out;
}

}  // namespace
}  // namespace fusetune
