#include "worker_context.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <utility>

#include "absl/time/clock.h"
#include "fusetune/wire/connection.h"

namespace fusetune::worker_internal {
namespace {

std::shared_ptr<FailoverChannels> MakeChannels(const WorkerOptions& options) {
  // gRPC's own reconnect backoff is bounded by the worker's, so that a restarted server is
  // seen within backoff.max_ms.
  grpc::ChannelArguments args = ReconnectChannelArguments(options.backoff.initial_ms, options.backoff.max_ms);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (options.tls_root_certs.empty()) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_root_certs;
    creds = grpc::SslCredentials(ssl);
  }
  absl::StatusOr<std::vector<std::string>> addresses = ParseServiceAddresses(options.server, "--server");
  // Worker::Start checked the list; an unchecked one is used as one address.
  return FailoverChannels::Create(addresses.ok() ? *addresses : std::vector<std::string>{options.server}, creds,
                                  args);
}

}  // namespace

WorkerContext::WorkerContext(WorkerOptions options)
    : options_(std::move(options)),
      channels_(MakeChannels(options_)) {
  for (size_t i = 0; i < channels_->size(); ++i) {
    worker_stubs_.push_back(v1::WorkerService::NewStub(channels_->channel(i)));
    tuning_stubs_.push_back(v1::TuningService::NewStub(channels_->channel(i)));
  }
  sem_init(&stop_posted_, /*pshared=*/0, /*value=*/0);
}

WorkerContext::~WorkerContext() {
  EndStopRelay();
  sem_destroy(&stop_posted_);
}

void WorkerContext::RequestStop() {
  stop_.store(true, std::memory_order_relaxed);
  sem_post(&stop_posted_);  // async-signal-safe
}

bool WorkerContext::max_jobs_done() const {
  return options_.max_jobs > 0 && jobs_completed.load() + jobs_failed.load() >= options_.max_jobs;
}

void WorkerContext::StartStopRelay(std::function<void()> on_stop) {
  on_stop_ = std::move(on_stop);
  relay_end_.store(false);
  relay_ = std::thread([this] { RelayLoop(); });
}

void WorkerContext::EndStopRelay() {
  if (!relay_.joinable()) return;
  relay_end_.store(true);
  sem_post(&stop_posted_);
  relay_.join();
}

void WorkerContext::RelayLoop() {
  bool relayed = false;
  while (true) {
    if (sem_wait(&stop_posted_) != 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (relay_end_.load()) return;
    if (!stopping() || relayed) continue;
    relayed = true;
    NotifyEvent();
    CancelAllCalls();
    if (on_stop_) on_stop_();
  }
}

void WorkerContext::NotifyEvent() {
  absl::MutexLock lock(&mu_);
  cv_.SignalAll();
}

void WorkerContext::WaitUntil(const std::function<bool()>& ready) {
  absl::MutexLock lock(&mu_);
  while (!ready()) cv_.Wait(&mu_);
}

void WorkerContext::SleepUnlessStopping(absl::Duration d) {
  const absl::Time until = absl::Now() + d;
  absl::MutexLock lock(&mu_);
  while (!stopping() && absl::Now() < until) cv_.WaitWithDeadline(&mu_, until);
}

void WorkerContext::SleepUnlessEnding(absl::Duration d) {
  const absl::Time until = absl::Now() + d;
  absl::MutexLock lock(&mu_);
  while (!ending() && absl::Now() < until) cv_.WaitWithDeadline(&mu_, until);
}

bool WorkerContext::ReserveJob() {
  if (options_.max_jobs <= 0) return !ending();
  absl::MutexLock lock(&mu_);
  while (!ending() && jobs_reserved_ >= options_.max_jobs) cv_.Wait(&mu_);
  if (ending()) return false;
  ++jobs_reserved_;
  return true;
}

void WorkerContext::ReturnJob() {
  absl::MutexLock lock(&mu_);
  --jobs_reserved_;
  cv_.SignalAll();
}

void WorkerContext::CountFinishedJob(bool success) {
  (success ? jobs_completed : jobs_failed).fetch_add(1);
  if (max_jobs_done()) CancelAllCalls();
  NotifyEvent();
}

void WorkerContext::Prepare(grpc::ClientContext& ctx, absl::Duration timeout, bool cancel_on_stop) {
  ctx.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  AddBearerToken(ctx, options_.token);
  if (!cancel_on_stop) return;
  if (channels_->size() == 1) ctx.set_wait_for_ready(true);
  absl::MutexLock lock(&calls_mu_);
  calls_.insert(&ctx);
  // A stop (or max_jobs) that came before this call was registered cancelled the others
  // already; this one would otherwise wait out its whole long poll.
  if (ending()) ctx.TryCancel();
}

void WorkerContext::Done(grpc::ClientContext& ctx) {
  absl::MutexLock lock(&calls_mu_);
  calls_.erase(&ctx);
}

void WorkerContext::CancelAllCalls() {
  absl::MutexLock lock(&calls_mu_);
  for (grpc::ClientContext* c : calls_) c->TryCancel();
}

void WorkerContext::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
    return;
  }
  const absl::Time now = absl::Now();
  std::fprintf(stderr, "%s %s\n", absl::FormatTime("%H:%M:%E3S", now, absl::UTCTimeZone()).c_str(), line.c_str());
}

}  // namespace fusetune::worker_internal
