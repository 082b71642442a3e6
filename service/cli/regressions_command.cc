// fusetune regressions: the regression verdicts a fusetune server holds (ListRegressions):
// per compared cell (problem, config, metric) at a commit against its baseline commit, the
// ratio new / baseline, the corrected p-value and the verdict.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "fmt/format.h"
#include "fusetune/records/commit.h"
#include "fusetune/wire/convert.h"
#include "nlohmann/json.hpp"
#include "problem_flags.h"
#include "server_connection.h"
#include "text_table.h"

namespace fusetune::cli {
namespace {

struct RegressionsFlags {
  ServerConnectionFlags connection;
  std::string commit;
  int limit = 100;
  bool json = false;
};

nlohmann::json RegressionJson(const v1::Regression& r) {
  return {{"commit", r.commit()},
          {"baseline_commit", r.baseline_commit()},
          {"device_class", r.device_class()},
          {"problem_key", r.problem_key()},
          {"config_key", r.config_key()},
          {"metric", r.metric()},
          {"ratio", r.ratio()},
          {"p_value", r.p_value()},
          {"verdict", r.verdict()},
          {"created_unix_ms", r.created_unix_ms()}};
}

int RunRegressions(const RegressionsFlags& f) {
  const std::string cmd = "regressions";
  // In canonical form; an abbreviation is resolved by the server against the commits it stores.
  std::string commit;
  if (!f.commit.empty()) {
    absl::StatusOr<CommitName> named = ParseCommitName(f.commit);
    if (!named.ok()) return UsageError(cmd, "--commit: " + std::string(named.status().message()));
    commit = named->text;
  }
  auto connection = ServerConnection::Open(f.connection);
  if (!connection.ok()) return UsageError(cmd, std::string(connection.status().message()));
  v1::ListRegressionsRequest req;
  req.set_commit(commit);
  req.set_limit(f.limit);
  v1::ListRegressionsResponse resp;
  grpc::Status status = connection->Read(&v1::TuningService::Stub::ListRegressions, req, &resp);
  if (!status.ok()) return RpcFailure(cmd, status);
  if (f.json) {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& r : resp.regressions()) all.push_back(RegressionJson(r));
    std::printf("%s\n", all.dump(2).c_str());
    return kExitOk;
  }
  // Ratio new / baseline (latency: > 1 is slower); p-value after the suite's correction.
  TextTable table({{"CREATED"},
                   {"VERDICT"},
                   {"RATIO", TextAlign::kRight},
                   {"P", TextAlign::kRight},
                   {"METRIC"},
                   {"COMMIT"},
                   {"BASELINE"},
                   {"CONFIG"},
                   {"PROBLEM"},
                   {"DEVICE_CLASS"}});
  for (const auto& r : resp.regressions()) {
    table.AddRow({UtcTime(r.created_unix_ms()), r.verdict(), fmt::format("{:.4f}", r.ratio()),
                  fmt::format("{:.2g}", r.p_value()), r.metric(), r.commit(), r.baseline_commit(), r.config_key(),
                  r.problem_key(), r.device_class()});
  }
  table.Print();
  return kExitOk;
}

}  // namespace

void AddRegressionsCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<RegressionsFlags>();
  CLI::App* regressions = app.add_subcommand(
      "regressions", "List the regression verdicts a fusetune server holds (per cell: commit against its "
                     "baseline, ratio new/baseline, corrected p-value, verdict), newest first.");
  flags->connection.Register(regressions, /*with_server=*/true);
  regressions->add_option("--commit", flags->commit,
                          "only verdicts of this commit under test (12 or more hex digits, or 7 or more resolved "
                          "against the server's commits)");
  regressions->add_option("--limit", flags->limit, "at most this many")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  regressions->add_flag("--json", flags->json, "print JSON");
  SetAction(regressions, context, [flags] { return RunRegressions(*flags); });
}

}  // namespace fusetune::cli
