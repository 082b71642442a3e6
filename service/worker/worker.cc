#include "fusetune/worker/worker.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "device_runner.h"
#include "fusetune/kernels/cpu_backend.h"
#include "fusetune/wire/connection.h"
#include "fusetune/wire/failover.h"
#include "fusetune/wire/records_convert.h"
#include "fusetune/wire/status.h"
#include "fusetune/worker/spool.h"
#include "worker_context.h"

namespace fusetune {
namespace {

using worker_internal::DeviceRunner;
using worker_internal::WorkerContext;

absl::Status CheckOptions(const WorkerOptions& options) {
  // A malformed address is a usage error now, not an endless reconnect loop later.
  if (absl::StatusOr<std::vector<std::string>> a = ParseServiceAddresses(options.server, "--server"); !a.ok()) {
    return a.status();
  }
  if (options.spool_dir.empty()) return absl::InvalidArgumentError("--spool is required (a directory)");
  if (options.lease_wait_ms < 0 || options.lease_wait_ms > 30000) {
    return absl::InvalidArgumentError("--lease-wait-ms must be in [0, 30000]");
  }
  if (options.max_jobs < 0) return absl::InvalidArgumentError("--max-jobs must be >= 0");
  if (options.cpu_devices < 0 || options.cpu_devices > 64) {
    return absl::InvalidArgumentError("--cpu-devices must be in [0, 64]");
  }
  if (options.cpu_devices > 0 && options.backend != "cpu") {
    return absl::InvalidArgumentError("--cpu-devices needs --backend cpu");
  }
  return absl::OkStatus();
}

// Fills in the host name, the worker id and the backend factory where not given.
absl::Status CompleteOptions(WorkerOptions& options) {
  if (options.host.empty()) {
    char name[256] = {};
    options.host = ::gethostname(name, sizeof(name) - 1) == 0 ? name : "unknown";
  }
  if (options.worker_id.empty()) {
    for (char c : options.host) {
      options.worker_id.push_back(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ? c : '_');
    }
  }
  if (absl::Status s = ValidateId(absl::StrCat(options.worker_id, "-d00"), "worker_id"); !s.ok()) return s;
  if (!options.backend_factory) {
    const bool cpu_slots = options.cpu_devices > 0;
    const std::string backend = options.backend;
    options.backend_factory = [cpu_slots, backend](int index) -> absl::StatusOr<std::unique_ptr<Backend>> {
      if (cpu_slots) return CreateCpuBackend();  // independent instances of the one CPU
      return CreateBackend(backend, index);
    };
  }
  return absl::OkStatus();
}

// Which device slots to drive, and the CPU threads each may use (0: no cap).
struct Slots {
  std::vector<int> slots;
  int thread_cap = 0;
};

absl::StatusOr<Slots> DeviceSlots(const WorkerOptions& options) {
  Slots out;
  if (options.cpu_devices > 0) {
    for (int i = 0; i < options.cpu_devices; ++i) out.slots.push_back(i);
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    out.thread_cap = std::max(1, hw / options.cpu_devices);
  } else if (!options.devices.empty()) {
    out.slots = options.devices;
  } else {
    const int n = CountDevices(options.backend);
    if (n <= 0) return absl::UnavailableError(absl::StrCat("no ", options.backend, " device on this host"));
    for (int i = 0; i < n; ++i) out.slots.push_back(i);
  }
  for (int s : out.slots) {
    if (s < 0 || s > 99) return absl::InvalidArgumentError(absl::StrCat("device index ", s, " out of range"));
  }
  return out;
}

}  // namespace

Worker::Worker(std::shared_ptr<WorkerContext> context) : context_(std::move(context)) {}

void Worker::RequestStop() { context_->RequestStop(); }

Worker::~Worker() = default;

absl::StatusOr<std::unique_ptr<Worker>> Worker::Create(WorkerOptions options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  if (absl::Status s = CompleteOptions(options); !s.ok()) return s;
  std::error_code ec;
  std::filesystem::create_directories(options.spool_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create spool dir ", options.spool_dir, ": ", ec.message()));
  absl::StatusOr<Slots> slots = DeviceSlots(options);
  if (!slots.ok()) return slots.status();

  std::unique_ptr<Worker> worker(new Worker(std::make_shared<WorkerContext>(std::move(options))));
  const WorkerOptions& o = worker->context_->options();
  for (const int slot : slots->slots) {
    absl::StatusOr<std::unique_ptr<Backend>> backend = o.backend_factory(slot);
    if (!backend.ok()) {
      return absl::UnavailableError(absl::StrCat("device ", slot, ": ", backend.status().message()));
    }
    const std::string spool_path =
        (std::filesystem::path(o.spool_dir) / absl::StrCat(o.worker_id, "-d", slot, ".spool")).string();
    absl::StatusOr<std::unique_ptr<TrialSpool>> spool = TrialSpool::Open(spool_path);
    if (!spool.ok()) return spool.status();
    worker->devices_.push_back(std::make_unique<DeviceRunner>(worker->context_, slot, slot, *std::move(backend),
                                                              *std::move(spool), slots->thread_cap));
  }
  return worker;
}

absl::Status Worker::Run() {
  WorkerContext& ctx = *context_;
  ctx.Log(absl::StrCat("worker ", ctx.options().worker_id, ": ", devices_.size(), " device(s), server ",
                       ctx.options().server));
  ctx.StartStopRelay([this] {
    for (auto& d : devices_) d->OnStop();
  });
  for (auto& d : devices_) d->Start();
  // Every device's main loop ends on a stop or max_jobs; one hung in a kernel cannot end
  // and is not waited for then.
  ctx.WaitUntil([&] {
    const bool ending = ctx.ending();
    return std::all_of(devices_.begin(), devices_.end(),
                       [&](const auto& d) { return d->exited() || (ending && d->hung()); });
  });
  ctx.EndStopRelay();
  bool any_registered = false;
  for (auto& d : devices_) {
    any_registered = any_registered || d->ever_registered();
    if (!d->Join(absl::Seconds(1))) {
      ctx.Log(absl::StrCat("[", d->worker_id(), "] still hung in a kernel at exit; abandoned"));
      (void)d.release();  // its detached thread may still touch it
    }
  }
  const WorkerStats s = stats();
  ctx.Log(absl::StrCat("worker exiting: ", s.jobs_completed, " jobs completed, ", s.jobs_released, " released, ",
                       s.trials_recorded, " trials recorded, ", s.trials_uploaded, " uploaded"));
  if (!any_registered && !ctx.stopping()) return absl::UnavailableError("no device could register");
  return absl::OkStatus();
}

WorkerStats Worker::stats() const {
  const WorkerContext& ctx = *context_;
  WorkerStats s;
  s.jobs_completed = ctx.jobs_completed.load();
  s.jobs_failed = ctx.jobs_failed.load();
  s.jobs_released = ctx.jobs_released.load();
  s.jobs_lost = ctx.jobs_lost.load();
  s.trials_recorded = ctx.trials_recorded.load();
  s.trials_uploaded = ctx.trials_uploaded.load();
  s.trials_rejected = ctx.trials_rejected.load();
  s.device_failures = ctx.device_failures.load();
  s.devices = static_cast<int>(devices_.size());
  return s;
}

std::vector<std::string> Worker::device_worker_ids() const {
  std::vector<std::string> out;
  for (const auto& d : devices_) out.push_back(d->worker_id());
  return out;
}

std::vector<std::string> Worker::spool_paths() const {
  std::vector<std::string> out;
  for (const auto& d : devices_) out.push_back(d->spool_path());
  return out;
}

}  // namespace fusetune
