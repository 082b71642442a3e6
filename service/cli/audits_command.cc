// fusetune audits: the audits reported to a fusetune server (ListAudits): for each audited
// problem, its recorded best config against the fastest config of its space, and the regret.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "fmt/format.h"
#include "fusetune/wire/convert.h"
#include "nlohmann/json.hpp"
#include "problem_flags.h"
#include "server_connection.h"
#include "text_table.h"

namespace fusetune::cli {
namespace {

struct AuditsFlags {
  ServerConnectionFlags connection;
  std::string device_class;
  std::string problem_key;
  int limit = 100;
  bool json = false;
};

nlohmann::json AuditJson(const v1::AuditSummary& a) {
  return {{"audit_id", a.audit_id()},
          {"run_id", a.run_id()},
          {"device_class", a.device_class()},
          {"problem_key", a.problem_key()},
          {"recorded_config_key", a.recorded_config_key()},
          {"best_config_key", a.best_config_key()},
          {"recorded_us", a.recorded_us()},
          {"best_us", a.best_us()},
          {"regret", a.regret()},
          {"regret_low", a.regret_low()},
          {"regret_high", a.regret_high()},
          {"rounds", a.rounds()},
          {"configs_measured", a.configs_measured()},
          {"configs_failed", a.configs_failed()},
          {"commit", a.commit()},
          {"created_unix_ms", a.created_unix_ms()}};
}

int RunAudits(const AuditsFlags& f) {
  const std::string cmd = "audits";
  if (!f.device_class.empty()) {
    if (auto s = ValidateDeviceClass(f.device_class); !s.ok()) return UsageError(cmd, std::string(s.message()));
  }
  auto connection = ServerConnection::Open(f.connection);
  if (!connection.ok()) return UsageError(cmd, std::string(connection.status().message()));
  v1::ListAuditsRequest req;
  req.set_device_class(f.device_class);
  req.set_problem_key(f.problem_key);
  req.set_limit(f.limit);
  v1::ListAuditsResponse resp;
  grpc::Status status = connection->Read(&v1::TuningService::Stub::ListAudits, req, &resp);
  if (!status.ok()) return RpcFailure(cmd, status);
  if (f.json) {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& a : resp.audits()) all.push_back(AuditJson(a));
    std::printf("%s\n", all.dump(2).c_str());
    return kExitOk;
  }
  // Regret in percent with its 90 % interval; times in µs.
  TextTable table({{"AUDIT", TextAlign::kRight},
                   {"CREATED"},
                   {"REGRET_%[90%CI]"},
                   {"ROUNDS", TextAlign::kRight},
                   {"RECORDED_US", TextAlign::kRight},
                   {"BEST_US", TextAlign::kRight},
                   {"CONFIGS", TextAlign::kRight},
                   {"FAILED", TextAlign::kRight},
                   {"RECORDED"},
                   {"BEST"},
                   {"PROBLEM"},
                   {"DEVICE_CLASS"}});
  for (const auto& a : resp.audits()) {
    table.AddRow({std::to_string(a.audit_id()), UtcTime(a.created_unix_ms()),
                  fmt::format("{:.2f} [{:.2f}, {:.2f}]", 100 * a.regret(), 100 * a.regret_low(), 100 * a.regret_high()),
                  std::to_string(a.rounds()), fmt::format("{:.2f}", a.recorded_us()), fmt::format("{:.2f}", a.best_us()),
                  std::to_string(a.configs_measured()), std::to_string(a.configs_failed()), a.recorded_config_key(),
                  a.best_config_key(), a.problem_key(), a.device_class()});
  }
  table.Print();
  return kExitOk;
}

}  // namespace

void AddAuditsCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<AuditsFlags>();
  CLI::App* audits = app.add_subcommand(
      "audits", "List the audits reported to a fusetune server (audit jobs: `submit --job-kind audit`), newest first.");
  flags->connection.Register(audits, /*with_server=*/true);
  audits->add_option("--device-class", flags->device_class, "only audits measured on this device class");
  audits->add_option("--problem-key", flags->problem_key, "only audits of this problem key");
  audits->add_option("--limit", flags->limit, "at most this many")->capture_default_str()->check(CLI::Range(1, 1000));
  audits->add_flag("--json", flags->json, "print JSON");
  SetAction(audits, context, [flags] { return RunAudits(*flags); });
}

}  // namespace fusetune::cli
