// `fusetune audit` as a user runs it: after a sweep, it prints each problem's regret and
// records the audit (its summary in `audits`, its trials as audit-stage trials of a finished
// run labelled "audit"); a problem without a record is exit 3, a missing database exit 1
// (not created), bad flags exit 2, and SIGTERM stops it with exit 4.
#include <signal.h>

#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "fusetune/db/store.h"
#include "fusetune/kernels/backend.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace fusetune {
namespace {

using testing::CommandResult;
using testing::RunCommand;
using testing::Subprocess;
using testing::TempDir;

// A tiny CPU problem: its whole space verifies and times in seconds.
const std::vector<std::string> kProblem = {"--seq", "48", "--heads", "2", "--head-dim", "32"};
constexpr char kProblemKey[] = "prefill/b1/hq2/hkv2/q48/k48/d32/causal0/fp32";

CommandResult Fusetune(std::vector<std::string> args) {
  args.insert(args.begin(), FUSETUNE_BINARY);
  return RunCommand(args, 600);
}

std::vector<std::string> With(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::string CpuDeviceClass() {
  absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend("cpu");
  return cpu.ok() ? (*cpu)->Describe().DeviceClass() : "?";
}

std::unique_ptr<Store> OpenReadOnly(const std::string& db) {
  StoreOptions options;
  options.access = StoreAccess::kReadOnly;
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(db, options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

void Sweep(const std::string& db) {
  CommandResult sweep = Fusetune(With({"sweep", "--db", db, "--max-trials", "2", "--repeats", "3"}, kProblem));
  ASSERT_EQ(sweep.exit_code, 0) << sweep.out << sweep.err;
}

TEST(AuditCommand, AfterASweepPrintsTheRegretAndRecordsTheAudit) {
  TempDir dir;
  const std::string db = dir.File("fusetune.db");
  ASSERT_NO_FATAL_FAILURE(Sweep(db));
  const std::string device_class = CpuDeviceClass();
  std::string recorded_config;
  {
    auto store = OpenReadOnly(db);
    ASSERT_NE(store, nullptr);
    absl::StatusOr<BestConfig> best = store->GetBestConfig(device_class, kProblemKey);
    ASSERT_TRUE(best.ok()) << best.status();
    recorded_config = best->config_key;
    EXPECT_TRUE(store->ListAudits()->empty());
  }

  CommandResult audit = Fusetune(With({"audit", "--db", db}, kProblem));
  ASSERT_EQ(audit.exit_code, 0) << audit.out << audit.err;
  const std::regex line(std::string("(^|\n)") + kProblemKey +
                        R"(: recorded (\S+), best (\S+): regret (-?[0-9.]+)% )"
                        R"(\(90% CI (-?[0-9.]+)% to (-?[0-9.]+)%\) from per-round ratios; )"
                        R"(round medians ([0-9.]+) us recorded, ([0-9.]+) us best; (\d+) rounds, (\d+) configs measured)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(audit.out, m, line)) << audit.out;
  EXPECT_EQ(m[2].str(), recorded_config);
  const double regret = std::stod(m[4].str()), low = std::stod(m[5].str()), high = std::stod(m[6].str());
  EXPECT_LE(low, regret + 0.005) << m[0];  // printed with 2 decimals
  EXPECT_LE(regret, high + 0.005) << m[0];
  EXPECT_GE(std::stoi(m[9].str()), 3) << "at least 3 rounds: " << m[0];
  EXPECT_GE(std::stoi(m[10].str()), 1) << m[0];
  EXPECT_NE(audit.out.find("audited 1 problem(s)"), std::string::npos) << audit.out;
  EXPECT_NE(audit.out.find("median regret"), std::string::npos) << audit.out;

  auto store = OpenReadOnly(db);
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<AuditSummary>> audits = store->ListAudits(device_class, kProblemKey);
  ASSERT_TRUE(audits.ok()) << audits.status();
  ASSERT_EQ(audits->size(), 1u);
  const AuditSummary& a = audits->front();
  EXPECT_EQ(a.recorded_config_key, recorded_config);
  EXPECT_EQ(a.best_config_key, m[3].str());
  EXPECT_EQ(a.rounds, std::stoi(m[9].str()));
  EXPECT_EQ(a.configs_measured, std::stoi(m[10].str()));
  EXPECT_FALSE(a.commit.empty());
  // Its run is a finished "audit" run holding the audit's trials, all of the audit stage.
  ASSERT_GT(a.run_id, 0);
  absl::StatusOr<RunInfo> run = store->GetRun(a.run_id);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->label, "audit");
  EXPECT_GT(run->finished_unix_ms, 0);
  absl::StatusOr<std::vector<Trial>> trials = store->ListTrials(a.run_id);
  ASSERT_TRUE(trials.ok()) << trials.status();
  EXPECT_GE(trials->size(), static_cast<size_t>(a.configs_measured));
  for (const Trial& t : *trials) EXPECT_EQ(t.stage, TrialStage::kAudit) << t.config_key;

  // report shows the regret of the audited best config.
  CommandResult report = Fusetune({"report", "--db", db, "--json"});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const nlohmann::json rows = nlohmann::json::parse(report.out);
  ASSERT_EQ(rows.size(), 1u);
  ASSERT_TRUE(rows[0]["audit"].is_object()) << rows.dump(2);
  EXPECT_EQ(rows[0]["audit"]["audit_id"], a.audit_id);

  // --json: the summaries, with the documented fields; a second audit is a second row.
  CommandResult json = Fusetune({"audit", "--db", db, "--all", "--json", "--variants", "fused", "--repeats", "3"});
  ASSERT_EQ(json.exit_code, 0) << json.out << json.err;
  const nlohmann::json summaries = nlohmann::json::parse(json.out);
  ASSERT_EQ(summaries.size(), 1u) << json.out;
  for (const char* field : {"audit_id", "run_id", "device_class", "problem", "recorded_config", "recorded_us",
                            "best_config", "best_us", "regret", "regret_low", "regret_high", "rounds",
                            "configs_measured", "configs_failed", "commit", "seconds"}) {
    EXPECT_TRUE(summaries[0].contains(field)) << field << " in " << json.out;
  }
  EXPECT_EQ(summaries[0]["problem"], kProblemKey);
  EXPECT_EQ(summaries[0]["recorded_config"], recorded_config);
  EXPECT_EQ(OpenReadOnly(db)->ListAudits(device_class, kProblemKey)->size(), 2u);
}

TEST(AuditCommand, AProblemWithoutARecordIsExitThreeAndRecordsNothing) {
  TempDir dir;
  const std::string db = dir.File("fusetune.db");
  ASSERT_NO_FATAL_FAILURE(Sweep(db));
  ASSERT_TRUE(OpenReadOnly(db)->GetRun(1).ok()) << "the sweep's run";
  CommandResult r = Fusetune({"audit", "--db", db, "--seq", "96", "--heads", "2", "--head-dim", "32"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("no best config recorded"), std::string::npos) << r.err;
  auto store = OpenReadOnly(db);
  EXPECT_TRUE(store->ListAudits()->empty());
  EXPECT_EQ(store->GetRun(2).status().code(), absl::StatusCode::kNotFound) << "no audit run was opened";
}

TEST(AuditCommand, AMissingDatabaseIsAFailureAndIsNotCreated) {
  TempDir dir;
  const std::string db = dir.File("missing.db");
  CommandResult r = Fusetune(With({"audit", "--db", db}, kProblem));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("no database at " + db), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(db));
}

TEST(AuditCommand, BadFlagsAreUsageErrorsAndCreateNothing) {
  TempDir dir;
  const std::string db = dir.File("never.db");
  const std::vector<std::vector<std::string>> cases = {
      {"audit", "--db", db},                                  // which problems?
      {"audit", "--db", db, "--all", "--seq", "48"},          // both
      {"audit", "--db", db, "--seq", "48", "--rounds", "2"},  // fewer than 3 rounds
      {"audit", "--db", db, "--seq", "48", "--rounds", "1001"},
      {"audit", "--db", db, "--seq", "48", "--repeats", "0"},
      {"audit", "--db", db, "--seq", "48", "--variants", "fused,bogus"},
      {"audit", "--db", db, "--seq", "48", "--precisions", "fp16"},  // nothing left for fp32 storage
      {"audit", "--db", db, "--seq", "48", "--backend", "tpu"},
      {"audit", "--db", "", "--seq", "48"},
  };
  for (const auto& args : cases) {
    CommandResult r = Fusetune(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined << "\nstdout: " << r.out << "\nstderr: " << r.err;
    EXPECT_FALSE(r.err.empty()) << joined;
    EXPECT_FALSE(std::filesystem::exists(db)) << joined << " created the database";
  }
}

TEST(AuditCommand, SigtermStopsItWithExitFour) {
  TempDir dir;
  const std::string db = dir.File("fusetune.db");
  ASSERT_NO_FATAL_FAILURE(Sweep(db));
  // Enough rounds and repeats that the audit is still measuring when the signal comes.
  Subprocess audit(With({FUSETUNE_BINARY, "audit", "--db", db, "--rounds", "1000", "--repeats", "200"}, kProblem),
                   dir.path());
  ASSERT_TRUE(audit.started());
  // The run line is printed just before the measurements start.
  ASSERT_TRUE(testing::WaitFor([&] { return audit.Stdout().find("audit run") != std::string::npos; }, 120))
      << audit.Stdout() << audit.Stderr();
  ASSERT_FALSE(audit.Poll().has_value()) << audit.Stdout() << audit.Stderr();
  audit.Signal(SIGTERM);
  EXPECT_EQ(audit.Wait(120).value_or(-1), 4) << audit.Stdout() << audit.Stderr();
  EXPECT_NE(audit.Stderr().find("stopped by a signal"), std::string::npos) << audit.Stderr();
  auto store = OpenReadOnly(db);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->ListAudits()->empty()) << "the interrupted audit is not recorded";
}

}  // namespace
}  // namespace fusetune
