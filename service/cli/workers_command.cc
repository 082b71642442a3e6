// fusetune workers: the workers registered with a fusetune server (ListWorkers): id, host,
// device class, when each was last seen, and the job it holds.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "nlohmann/json.hpp"
#include "problem_flags.h"
#include "server_connection.h"
#include "text_table.h"

namespace fusetune::cli {
namespace {

struct WorkersFlags {
  ServerConnectionFlags connection;
  int limit = 1000;
  bool json = false;
};

nlohmann::json WorkerJson(const v1::WorkerStatus& w) {
  nlohmann::json jobs = nlohmann::json::array();
  for (int64_t id : w.leased_job_ids()) jobs.push_back(id);
  return {{"worker_id", w.worker_id()},
          {"host", w.host()},
          {"device_class", w.device_class()},
          {"backend", w.backend()},
          {"device_name", w.device_name()},
          {"device_index", w.device_index()},
          {"registered_unix_ms", w.registered_unix_ms()},
          {"last_seen_unix_ms", w.last_seen_unix_ms()},
          {"alive", w.alive()},
          {"leased_job_ids", jobs},
          {"lease_expiry_unix_ms", w.lease_expiry_unix_ms()}};
}

// "4.2s ago", measured on the server's clock (now_unix_ms) so client skew does not matter.
std::string Ago(int64_t then_unix_ms, int64_t now_unix_ms) {
  if (then_unix_ms <= 0) return "never";
  const double s = static_cast<double>(now_unix_ms - then_unix_ms) / 1000.0;
  char buf[32];
  if (s < 120) {
    std::snprintf(buf, sizeof(buf), "%.1fs ago", s < 0 ? 0.0 : s);
  } else if (s < 7200) {
    std::snprintf(buf, sizeof(buf), "%.0fm ago", s / 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1fh ago", s / 3600);
  }
  return buf;
}

int RunWorkers(const WorkersFlags& f) {
  const std::string cmd = "workers";
  auto connection = ServerConnection::Open(f.connection);
  if (!connection.ok()) return UsageError(cmd, std::string(connection.status().message()));
  v1::ListWorkersRequest req;
  req.set_limit(f.limit);
  v1::ListWorkersResponse resp;
  grpc::Status status = connection->Read(&v1::TuningService::Stub::ListWorkers, req, &resp);
  if (!status.ok()) return RpcFailure(cmd, status);
  if (f.json) {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& w : resp.workers()) all.push_back(WorkerJson(w));
    std::printf("%s\n", all.dump(2).c_str());
    return kExitOk;
  }
  TextTable table({{"WORKER"}, {"HOST"}, {"STATE"}, {"LAST_SEEN"}, {"JOB"}, {"DEVICE_CLASS"}});
  for (const auto& w : resp.workers()) {
    std::string jobs;
    for (int64_t id : w.leased_job_ids()) jobs += (jobs.empty() ? "" : ",") + std::to_string(id);
    table.AddRow({w.worker_id(), w.host(), w.alive() ? "alive" : "gone", Ago(w.last_seen_unix_ms(), resp.now_unix_ms()),
                  jobs.empty() ? "-" : jobs, w.device_class()});
  }
  table.Print();
  if (resp.truncated()) std::printf("(more workers than --limit %d)\n", f.limit);
  return kExitOk;
}

}  // namespace

void AddWorkersCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<WorkersFlags>();
  CLI::App* workers = app.add_subcommand(
      "workers", "List the workers registered with a fusetune server: host, device class, last seen, job held.");
  flags->connection.Register(workers, /*with_server=*/true);
  workers->add_option("--limit", flags->limit, "at most this many")->capture_default_str()->check(CLI::Range(1, 10000));
  workers->add_flag("--json", flags->json, "print JSON");
  SetAction(workers, context, [flags] { return RunWorkers(*flags); });
}

}  // namespace fusetune::cli
