// fusetune submit: queue a job (tune, or audit the recorded best configs) on `fusetune
// serve`, and optionally wait for it.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "fusetune/records/commit.h"
#include "fusetune/wire/convert.h"
#include "nlohmann/json.hpp"
#include "problem_flags.h"
#include "server_connection.h"

namespace fusetune::cli {
namespace {

struct SubmitFlags {
  ServerConnectionFlags connection;
  ProblemFlags problem;
  std::string device_class;
  std::string kind = "tune";
  std::string commit;
  int max_trials = 0;
  double max_seconds = 0;
  std::vector<std::string> variants;
  std::vector<std::string> precisions;
  bool wait = false;
  double wait_timeout_s = 3600;
  bool json = false;
};

int RunSubmit(const SubmitFlags& f) {
  const std::string cmd = "submit";
  auto problems = f.problem.Build();
  if (!problems.ok()) return UsageError(cmd, std::string(problems.status().message()));
  if (auto s = ValidateDeviceClass(f.device_class); !s.ok()) return UsageError(cmd, std::string(s.message()));
  if (auto v = ParseVariants(f.variants); !v.ok()) return UsageError(cmd, std::string(v.status().message()));
  if (auto p = ParsePrecisions(f.precisions); !p.ok()) return UsageError(cmd, std::string(p.status().message()));
  auto kind = ParseJobKind(f.kind);
  if (!kind.ok()) return UsageError(cmd, std::string(kind.status().message()));
  absl::StatusOr<std::string> commit = f.commit.empty() ? BuiltCommit() : CanonicalCommit(f.commit);
  if (!commit.ok()) return UsageError(cmd, "--commit: " + std::string(commit.status().message()));
  auto connection = ServerConnection::Open(f.connection);
  if (!connection.ok()) return UsageError(cmd, std::string(connection.status().message()));

  v1::SubmitTuningJobRequest req;
  for (const AttentionProblem& p : *problems) ProblemToProto(p, req.add_problems());
  req.set_device_class(f.device_class);
  req.set_kind(*kind);
  req.set_commit(*commit);
  req.set_max_trials(f.max_trials);
  req.set_max_seconds(f.max_seconds);
  for (const auto& v : f.variants) req.add_variants(v);
  for (const auto& p : f.precisions) req.add_precisions(p);
  v1::SubmitTuningJobResponse resp;
  grpc::Status status = connection->tuning().SubmitTuningJob(connection->Context().get(), req, &resp);
  if (!status.ok()) return RpcFailure(cmd, status);
  if (!f.wait) {
    if (f.json) {
      std::printf("%s\n", nlohmann::json{{"job_id", resp.job_id()}}.dump().c_str());
    } else {
      std::printf("%s job %lld queued: %d problem(s) on %s\n", f.kind.c_str(), static_cast<long long>(resp.job_id()),
                  req.problems_size(), f.device_class.c_str());
    }
    return kExitOk;
  }
  if (!f.json) {
    std::printf("job %lld queued; waiting\n", static_cast<long long>(resp.job_id()));
    std::fflush(stdout);
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(f.wait_timeout_s * 1000));
  v1::GetJobRequest get;
  get.set_job_id(resp.job_id());
  while (true) {
    v1::Job job;
    status = connection->Read(&v1::TuningService::Stub::GetJob, get, &job);
    if (!status.ok()) return RpcFailure(cmd, status);
    if (job.state() == "done" || job.state() == "failed") {
      if (f.json) {
        std::printf("%s\n", nlohmann::json{{"job_id", job.job_id()},
                                           {"state", job.state()},
                                           {"run_id", job.run_id()},
                                           {"trials_recorded", job.trials_recorded()},
                                           {"error", job.error()}}
                                .dump()
                                .c_str());
      } else {
        std::printf("job %lld %s: run %lld, %lld trial(s)%s%s\n", static_cast<long long>(job.job_id()),
                    job.state().c_str(), static_cast<long long>(job.run_id()),
                    static_cast<long long>(job.trials_recorded()), job.error().empty() ? "" : ", error: ",
                    job.error().c_str());
      }
      return job.state() == "done" ? kExitOk : kExitFailure;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::fprintf(stderr, "fusetune submit: job %lld still %s after %.0f s\n", static_cast<long long>(job.job_id()),
                   job.state().c_str(), f.wait_timeout_s);
      return kExitFailure;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

}  // namespace

void AddSubmitCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<SubmitFlags>();
  CLI::App* submit = app.add_subcommand(
      "submit", "Queue a job on a fusetune server: tune its problems, or audit their recorded best configs.");
  flags->connection.Register(submit, /*with_server=*/true);
  flags->problem.Register(submit, /*allow_list=*/true);
  submit->add_option("--device-class", flags->device_class, "device class that must run it, e.g. cpu/<model>/<isa>")
      ->required();
  // Not --kind: that is the problem's kind (prefill or decode), among the problem flags.
  submit->add_option("--job-kind", flags->kind,
                     "tune: sweep and record the best configs; audit: re-measure each problem's recorded best "
                     "against its whole space and report the regret (see `fusetune audits`)")
      ->capture_default_str()
      ->check(CLI::IsMember({"tune", "audit"}));
  submit->add_option("--commit", flags->commit, "fusetune commit to run: 12 or more hex digits (default: this binary's)");
  submit->add_option("--max-trials", flags->max_trials, "trials per problem and variant (0 = exhaustive)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  submit->add_option("--max-seconds", flags->max_seconds, "time budget per problem, s (0 = unbounded)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 604800.0));
  submit->add_option("--variants", flags->variants, "fused, partial, materialized (default: all)")->delimiter(',');
  submit->add_option("--precisions", flags->precisions, "fp32, tf32, fp16, bf16 (default: per dtype)")->delimiter(',');
  submit->add_flag("--wait", flags->wait, "wait until the job is done or failed (exit 1 if failed)");
  submit->add_option("--wait-timeout", flags->wait_timeout_s, "give up waiting after this many seconds")
      ->capture_default_str();
  submit->add_flag("--json", flags->json, "print JSON");
  SetAction(submit, context, [flags] { return RunSubmit(*flags); });
}

}  // namespace fusetune::cli
