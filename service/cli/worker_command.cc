// `fusetune worker`: the GPU-host daemon (service/worker/). Leases tuning jobs from
// `fusetune serve`, runs them on this host's devices, uploads every trial through a local
// spool. SIGTERM/SIGINT: finish the current trial, complete or release the job, exit 0.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "commands.h"
#include "fusetune/metrics/metrics_endpoint.h"
#include "fusetune/wire/connection.h"
#include "fusetune/worker/worker.h"
#include "fusetune/worker/worker_metrics.h"
#include "server_connection.h"

namespace fusetune::cli {
namespace {

std::atomic<Worker*> running_worker{nullptr};

extern "C" void OnWorkerStopSignal(int) {
  if (Worker* w = running_worker.load()) w->RequestStop();  // async-signal-safe
}

struct WorkerFlags {
  ServerConnectionFlags connection;  // --server, --token-file, --tls-ca
  std::string backend = "cpu";
  std::string devices = "all";
  int cpu_devices = 0;
  std::string spool = "./fusetune-spool";
  std::string worker_id;
  std::string metrics = "off";
  int max_jobs = 0;
  int lease_wait_ms = 10000;
  double trial_timeout_s = 300;
  double device_retry_s = 30;
  int backoff_max_ms = 5000;
  int device_error_streak = 3;
  int testing_trial_delay_ms = 0;
};

int RunWorkerCommand(const WorkerFlags& f) {
  WorkerOptions o;
  o.server = f.connection.server;
  o.backend = f.backend;
  o.cpu_devices = f.cpu_devices;
  o.spool_dir = f.spool;
  o.worker_id = f.worker_id;
  o.max_jobs = f.max_jobs;
  o.lease_wait_ms = f.lease_wait_ms;
  o.trial_timeout = absl::Seconds(f.trial_timeout_s);
  o.device_retry = absl::Seconds(f.device_retry_s);
  o.backoff.max_ms = f.backoff_max_ms;
  o.device_error_streak = f.device_error_streak;
  o.testing_trial_delay = absl::Milliseconds(f.testing_trial_delay_ms);

  // The token: --token-file's first line, else FUSETUNE_TOKEN.
  absl::StatusOr<std::string> token = f.connection.Token();
  if (!token.ok()) {
    std::fprintf(stderr, "fusetune worker: cannot read --token-file %s\n", f.connection.token_file.c_str());
    return kExitUsage;
  }
  o.token = *std::move(token);
  if (o.token.empty()) {
    std::fprintf(stderr, "fusetune worker: no token (--token-file or FUSETUNE_TOKEN)\n");
    return kExitUsage;
  }
  absl::StatusOr<std::string> root_certificates = f.connection.TlsRootCertificates();
  if (!root_certificates.ok()) {
    std::fprintf(stderr, "fusetune worker: %s\n", std::string(root_certificates.status().message()).c_str());
    return kExitUsage;
  }
  o.tls_root_certs = *std::move(root_certificates);
  if (f.devices != "all" && f.cpu_devices == 0) {
    for (absl::string_view part : absl::StrSplit(f.devices, ',')) {
      int index = 0;
      if (!absl::SimpleAtoi(part, &index) || index < 0) {
        std::fprintf(stderr, "fusetune worker: --devices must be 'all' or a list like 0,1 (got %s)\n",
                     f.devices.c_str());
        return kExitUsage;
      }
      o.devices.push_back(index);
    }
  }

  absl::StatusOr<std::unique_ptr<Worker>> worker = Worker::Create(std::move(o));
  if (!worker.ok()) {
    std::fprintf(stderr, "fusetune worker: %s\n", std::string(worker.status().message()).c_str());
    return absl::IsInvalidArgument(worker.status()) ? kExitUsage : kExitFailure;
  }
  // MetricsEndpoint, not prometheus-cpp's Exposer: it also starts in a process that has
  // loaded cuBLAS (see metrics_endpoint.h).
  std::unique_ptr<MetricsEndpoint> metrics;
  if (f.metrics != "off") {
    const Worker* w = worker->get();
    const std::vector<std::string> ids = w->device_worker_ids();
    const std::string backend = f.backend;
    auto endpoint = MetricsEndpoint::Start(
        f.metrics, [w, ids, backend] { return RenderWorkerMetrics(w->stats(), ids, backend); });
    if (!endpoint.ok()) {
      std::fprintf(stderr, "fusetune worker: %s\n", std::string(endpoint.status().message()).c_str());
      return absl::IsInvalidArgument(endpoint.status()) ? kExitUsage : kExitFailure;
    }
    metrics = std::move(*endpoint);
    const std::string host = f.metrics.substr(0, f.metrics.rfind(':'));
    std::fprintf(stderr, "fusetune worker: metrics on http://%s:%d/metrics\n", host.c_str(), metrics->port());
  }
  running_worker.store(worker->get());
  std::signal(SIGTERM, OnWorkerStopSignal);
  std::signal(SIGINT, OnWorkerStopSignal);
  absl::Status st = (*worker)->Run();
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  running_worker.store(nullptr);
  if (!st.ok()) {
    std::fprintf(stderr, "fusetune worker: %s\n", std::string(st.message()).c_str());
    return kExitFailure;
  }
  // A worker with a hung device leaves a detached thread behind; exit without running
  // static destructors under it.
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(kExitOk);
}

}  // namespace

void AddWorkerCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<WorkerFlags>();
  CLI::App* cmd = app.add_subcommand(
      "worker", "Run the worker daemon: lease tuning jobs from the service and run them on local devices");
  flags->connection.Register(cmd, ServerConnectionFlags::Server::kWithDefault, ServerConnectionFlags::Timeout::kNone);
  cmd->add_option("--backend", flags->backend, "device backend: cpu, cuda, hip")->capture_default_str();
  cmd->add_option("--devices", flags->devices, "devices to drive: 'all' or a list like 0,1")->capture_default_str();
  cmd->add_option("--cpu-devices", flags->cpu_devices,
                  "drive N independent CPU backend instances as separate devices (threads split; for tests)")
      ->check(CLI::Range(0, 64));
  cmd->add_option("--spool", flags->spool, "directory of the local trial spool")->capture_default_str();
  cmd->add_option("--metrics", flags->metrics,
                  "Prometheus /metrics address host:port (e.g. 0.0.0.0:9465), or 'off'")
      ->capture_default_str();
  cmd->add_option("--worker-id", flags->worker_id, "stable worker id (default: host name); devices add -d<N>");
  cmd->add_option("--max-jobs", flags->max_jobs, "exit after this many finished jobs (0 = run until stopped)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--lease-wait-ms", flags->lease_wait_ms, "LeaseJob long-poll wait")
      ->check(CLI::Range(0, 30000))
      ->capture_default_str();
  cmd->add_option("--trial-timeout-s", flags->trial_timeout_s,
                  "a trial running longer than this marks the device hung (its job is released)")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  cmd->add_option("--device-retry-s", flags->device_retry_s, "how long a failed device rests before a retry")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  cmd->add_option("--device-error-streak", flags->device_error_streak,
                  "this many launch failures in a row mark the device failed (0 = never)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--backoff-max-ms", flags->backoff_max_ms, "cap of the reconnect backoff")
      ->check(CLI::Range(10, 600000))
      ->capture_default_str();
  // Hidden (empty group): lets fault tests act mid-job on a fast CPU.
  cmd->add_option("--testing-trial-delay-ms", flags->testing_trial_delay_ms, "testing only: sleep after each trial")
      ->check(CLI::Range(0, 60000))
      ->group("");
  SetAction(cmd, context, [flags] { return RunWorkerCommand(*flags); });
}

}  // namespace fusetune::cli
