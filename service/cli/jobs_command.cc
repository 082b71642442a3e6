// fusetune jobs: list the tuning jobs of a fusetune server, or show one.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "fusetune/wire/convert.h"
#include "nlohmann/json.hpp"
#include "problem_flags.h"
#include "server_connection.h"
#include "text_table.h"

namespace fusetune::cli {
namespace {

struct JobsFlags {
  ServerConnectionFlags connection;
  std::string state;
  int limit = 100;
  int64_t id = 0;
  bool json = false;
};

nlohmann::json JobJson(const v1::Job& j) {
  nlohmann::json keys = nlohmann::json::array();
  for (const auto& k : j.problem_keys()) keys.push_back(k);
  return {{"job_id", j.job_id()},
          {"state", j.state()},
          {"kind", std::string(JobKindName(j.kind()))},
          {"device_class", j.device_class()},
          {"commit", j.commit()},
          {"problems", keys},
          {"leased_by", j.leased_by()},
          {"lease_expiry_unix_ms", j.lease_expiry_unix_ms()},
          {"attempts", j.attempts()},
          {"run_id", j.run_id()},
          {"trials_recorded", j.trials_recorded()},
          {"error", j.error()},
          {"created_unix_ms", j.created_unix_ms()},
          {"finished_unix_ms", j.finished_unix_ms()}};
}

int RunJobs(const JobsFlags& f) {
  const std::string cmd = "jobs";
  auto connection = ServerConnection::Open(f.connection);
  if (!connection.ok()) return UsageError(cmd, std::string(connection.status().message()));
  if (f.id > 0) {
    v1::GetJobRequest req;
    req.set_job_id(f.id);
    v1::Job job;
    grpc::Status status = connection->Read(&v1::TuningService::Stub::GetJob, req, &job);
    if (!status.ok()) return RpcFailure(cmd, status);
    if (f.json) {
      std::printf("%s\n", JobJson(job).dump(2).c_str());
    } else {
      std::printf("job %lld  %s  %s  %s  commit %s\n", static_cast<long long>(job.job_id()),
                  std::string(JobKindName(job.kind())).c_str(), job.state().c_str(), job.device_class().c_str(),
                  job.commit().c_str());
      std::printf("  created %s  finished %s  attempts %d  leased by %s\n", UtcTime(job.created_unix_ms()).c_str(),
                  UtcTime(job.finished_unix_ms()).c_str(), job.attempts(),
                  job.leased_by().empty() ? "-" : job.leased_by().c_str());
      std::printf("  run %lld  trials recorded %lld%s%s\n", static_cast<long long>(job.run_id()),
                  static_cast<long long>(job.trials_recorded()), job.error().empty() ? "" : "  error: ",
                  job.error().c_str());
      for (const auto& k : job.problem_keys()) std::printf("  %s\n", k.c_str());
    }
    return kExitOk;
  }
  v1::ListJobsRequest req;
  req.set_state(f.state);
  req.set_limit(f.limit);
  v1::ListJobsResponse resp;
  grpc::Status status = connection->Read(&v1::TuningService::Stub::ListJobs, req, &resp);
  if (!status.ok()) return RpcFailure(cmd, status);
  if (f.json) {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& j : resp.jobs()) all.push_back(JobJson(j));
    std::printf("%s\n", all.dump(2).c_str());
    return kExitOk;
  }
  TextTable table({{"JOB", TextAlign::kRight},
                   {"KIND"},
                   {"STATE"},
                   {"PROBLEMS", TextAlign::kRight},
                   {"ATTEMPTS", TextAlign::kRight},
                   {"CREATED"},
                   {"LEASED_BY"},
                   {"DEVICE_CLASS"}});
  for (const auto& j : resp.jobs()) {
    table.AddRow({std::to_string(j.job_id()), std::string(JobKindName(j.kind())), j.state(),
                  std::to_string(j.problem_keys_size()), std::to_string(j.attempts()), UtcTime(j.created_unix_ms()),
                  j.leased_by().empty() ? "-" : j.leased_by(), j.device_class()});
  }
  table.Print();
  return kExitOk;
}

}  // namespace

void AddJobsCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<JobsFlags>();
  CLI::App* jobs = app.add_subcommand("jobs", "List a fusetune server's tuning jobs (or show one with --id).");
  flags->connection.Register(jobs, /*with_server=*/true);
  jobs->add_option("--state", flags->state, "only jobs in this state")
      ->check(CLI::IsMember({"queued", "leased", "done", "failed"}));
  jobs->add_option("--limit", flags->limit, "at most this many")->capture_default_str()->check(CLI::Range(1, 1000));
  jobs->add_option("--id", flags->id, "show this job (with its trial count)")->check(CLI::PositiveNumber);
  jobs->add_flag("--json", flags->json, "print JSON");
  SetAction(jobs, context, [flags] { return RunJobs(*flags); });
}

}  // namespace fusetune::cli
