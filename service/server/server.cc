#include "fusetune/service/server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <system_error>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "fusetune/proto/fusetune.grpc.pb.h"
#include "fusetune/service/best_config_index.h"
#include "fusetune/service/connection.h"
#include "fusetune/service/convert.h"
#include "fusetune/tuner/selection.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "metrics.h"
#include "fusetune/base/strings.h"
#include "fusetune/base/time.h"

namespace fusetune {
namespace {


constexpr int kMaxBatchLookups = 1024;
constexpr int kMaxJobProblems = 256;
constexpr int kMaxTrialsPerStream = 4096;
constexpr int kTrialFlushBatch = 256;
constexpr int kMaxLeaseWaitMs = 30000;
constexpr size_t kMaxListTrialsBytes = 3u << 20;  // keeps replies under a client's 4 MiB default
constexpr char kWorkerIdMetadata[] = "x-fusetune-worker-id";

grpc::Status Invalid(std::string msg) { return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::move(msg)); }

grpc::Status CheckText(const std::string& value, size_t max, const char* field) {
  if (value.size() > max) {
    return Invalid(Cat(field, ": longer than ", max, " characters (", value.size(), ")"));
  }
  return grpc::Status::OK;
}

// Commits are hex digests or short names; refuse anything with whitespace or control bytes.
grpc::Status CheckCommit(const std::string& commit) {
  if (auto s = CheckText(commit, kMaxKeyLength, "commit"); !s.ok()) return s;
  for (char c : commit) {
    if (c <= ' ' || c > '~') return Invalid("commit: has whitespace or a non-printable character");
  }
  return grpc::Status::OK;
}

// Equal-length-independent comparison: every byte of the longer input is visited, so the
// time taken does not reveal how many leading bytes matched.
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

absl::StatusOr<std::string> ReadFirstLine(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(Cat("cannot read ", what, " file '", path, "'"));
  std::string line;
  std::getline(in, line);
  return std::string(absl::StripAsciiWhitespace(line));
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(Cat("cannot read ", what, " file '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

v1::GetBestConfigResponse::Provenance ToProto(Provenance p) {
  switch (p) {
    case Provenance::kExact: return v1::GetBestConfigResponse::EXACT;
    case Provenance::kNearest: return v1::GetBestConfigResponse::NEAREST;
    case Provenance::kDefault: return v1::GetBestConfigResponse::DEFAULT;
  }
  return v1::GetBestConfigResponse::PROVENANCE_UNSPECIFIED;
}

void AnswerToProto(const BestConfigAnswer& a, v1::GetBestConfigResponse* out) {
  ConfigToProto(a.config, out->mutable_config());
  out->set_provenance(ToProto(a.provenance));
  out->set_problem_key(a.problem_key);
  out->set_source_problem_key(a.source.problem_key);
  out->set_distance(a.distance);
  out->set_median_us(a.source.median_us);
  out->set_speedup_vs_materialized(a.source.speedup_vs_materialized);
  out->set_run_id(a.source.run_id);
  out->set_commit(a.source.commit);
  out->set_max_rel_error(a.source.max_rel_error);
}

// The job's spec: the SubmitTuningJobRequest it was queued from, stored as JSON.
absl::StatusOr<v1::SubmitTuningJobRequest> JobSpec(const Job& job) {
  v1::SubmitTuningJobRequest spec;
  if (auto s = google::protobuf::util::JsonStringToMessage(job.spec_json, &spec); !s.ok()) {
    return absl::InternalError(Cat("job ", job.job_id, ": stored spec is unreadable"));
  }
  return spec;
}

// Tune or audit, as submitted (the kind lives in the spec: a job stored before kinds
// existed has none there and is a tune job). An unreadable spec reads as tune here; such a
// job fails at its lease.
v1::JobKind JobKindOf(const Job& job) {
  auto spec = JobSpec(job);
  return spec.ok() ? spec->kind() : v1::JOB_KIND_TUNE;
}

void JobToProto(const Job& job, v1::Job* out) {
  out->set_job_id(job.job_id);
  out->set_state(std::string(JobStateName(job.state)));
  out->set_device_class(job.device_class);
  out->set_commit(job.commit);
  for (const auto& k : job.problem_keys) out->add_problem_keys(k);
  out->set_leased_by(job.leased_by);
  out->set_lease_expiry_unix_ms(job.lease_expiry_unix_ms);
  out->set_attempts(job.attempts);
  out->set_run_id(job.run_id);
  out->set_error(job.error);
  out->set_created_unix_ms(job.created_unix_ms);
  out->set_finished_unix_ms(job.finished_unix_ms);
  out->set_kind(JobKindOf(job));
}

void RegressionToProto(const Regression& r, v1::Regression* out) {
  out->set_commit(r.commit);
  out->set_baseline_commit(r.baseline_commit);
  out->set_device_class(r.device_class);
  out->set_problem_key(r.problem_key);
  out->set_config_key(r.config_key);
  out->set_metric(r.metric);
  out->set_ratio(r.ratio);
  out->set_p_value(r.p_value);
  out->set_verdict(r.verdict);
  out->set_created_unix_ms(r.created_unix_ms);
}

std::optional<JobState> ParseJobState(std::string_view s) {
  for (JobState st : {JobState::kQueued, JobState::kLeased, JobState::kDone, JobState::kFailed}) {
    if (JobStateName(st) == s) return st;
  }
  return std::nullopt;
}

// Counts a scarce resource (long-polls, streams); Acquire fails beyond the cap.
class Slots {
 public:
  explicit Slots(int cap) : cap_(cap) {}
  bool Acquire() {
    if (used_.fetch_add(1) >= cap_) {
      used_.fetch_sub(1);
      return false;
    }
    return true;
  }
  void Release() { used_.fetch_sub(1); }

 private:
  const int cap_;
  std::atomic<int> used_{0};
};

class SlotGuard {
 public:
  explicit SlotGuard(Slots* slots) : slots_(slots), held_(slots->Acquire()) {}
  ~SlotGuard() {
    if (held_) slots_->Release();
  }
  bool held() const { return held_; }

 private:
  Slots* slots_;
  bool held_;
};

// Every RPC of the two services, from the proto's own descriptors, so the metrics cover a
// method as soon as the proto has it.
std::vector<std::string> RpcMethodNames() {
  std::vector<std::string> names;
  for (const char* full_name : {v1::TuningService::service_full_name(), v1::WorkerService::service_full_name()}) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(full_name);
    if (service == nullptr) continue;
    for (int i = 0; i < service->method_count(); ++i) names.push_back(service->method(i)->name());
  }
  return names;
}

}  // namespace

// ------------------------------------------------------------------------------ Impl

class Server::Impl {
 public:
  Impl(ServerOptions options, std::string token, std::unique_ptr<Store> store,
       std::unique_ptr<ServiceMetrics> metrics)
      : options_(std::move(options)),
        token_(std::move(token)),
        store_(std::move(store)),
        metrics_(std::move(metrics)),
        long_polls_(options_.max_concurrent_long_polls),
        streams_(options_.max_concurrent_streams),
        index_(std::make_shared<const BestConfigIndex>()) {}

  absl::Status Init();
  absl::Status StartGrpc();
  void Shutdown();
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return shutting_down_; });
  }

  int port() const { return port_; }
  int metrics_port() const { return metrics_->port(); }
  Store* store() { return store_.get(); }

  // ---- shared by the handlers
  // Runs a handler body with metrics and a last-resort catch: nothing escapes to gRPC.
  template <typename F>
  grpc::Status Handle(const char* method, F&& body) {
    const auto start = std::chrono::steady_clock::now();
    grpc::Status status;
    try {
      status = body();
    } catch (const std::exception& e) {
      status = grpc::Status(grpc::StatusCode::INTERNAL, Cat("internal error: ", e.what()));
    } catch (...) {
      status = grpc::Status(grpc::StatusCode::INTERNAL, "internal error");
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    metrics_->ObserveRpc(method, status.error_code(), seconds);
    return status;
  }

  grpc::Status Authenticate(const grpc::ServerContextBase* ctx) const {
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    if (it == md.end()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "missing 'authorization: Bearer <token>' metadata");
    }
    std::string_view value(it->second.data(), it->second.size());
    constexpr std::string_view kBearer = "Bearer ";
    if (value.substr(0, kBearer.size()) != kBearer ||
        !ConstantTimeEquals(value.substr(kBearer.size()), token_)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "invalid token");
    }
    return grpc::Status::OK;
  }
  grpc::Status AuthenticateRead(const grpc::ServerContextBase* ctx) const {
    return options_.open_reads ? grpc::Status::OK : Authenticate(ctx);
  }

  // ---- TuningService
  grpc::Status GetBestConfig(const v1::GetBestConfigRequest& req, v1::GetBestConfigResponse* resp);
  grpc::Status SubmitTuningJob(const v1::SubmitTuningJobRequest& req, v1::SubmitTuningJobResponse* resp);
  grpc::Status GetJob(const v1::GetJobRequest& req, v1::Job* resp);
  grpc::Status ListJobs(const v1::ListJobsRequest& req, v1::ListJobsResponse* resp);
  grpc::Status ListTrials(const v1::ListTrialsRequest& req, v1::ListTrialsResponse* resp);
  grpc::Status ListRegressions(const v1::ListRegressionsRequest& req, v1::ListRegressionsResponse* resp);
  grpc::Status ListWorkers(const v1::ListWorkersRequest& req, v1::ListWorkersResponse* resp);
  grpc::Status ListAudits(const v1::ListAuditsRequest& req, v1::ListAuditsResponse* resp);

  // ---- WorkerService
  grpc::Status RegisterWorker(const v1::RegisterWorkerRequest& req, v1::RegisterWorkerResponse* resp);
  // LeaseJob runs on the callback API (LeaseCall below): starts the call's long-poll.
  grpc::ServerUnaryReactor* StartLeaseJob(grpc::CallbackServerContext* ctx, const v1::LeaseJobRequest* req,
                                          v1::LeaseJobResponse* resp);
  grpc::Status Heartbeat(grpc::ServerContextBase* ctx, const v1::HeartbeatRequest& req,
                         v1::HeartbeatResponse* resp);
  grpc::Status ReportTrials(grpc::ServerContext* ctx, grpc::ServerReader<v1::Trial>* reader,
                            v1::ReportTrialsResponse* resp);
  grpc::Status CompleteJob(const v1::CompleteJobRequest& req);
  grpc::Status ReportAudit(grpc::ServerContextBase* ctx, const v1::ReportAuditRequest& req,
                           v1::ReportAuditResponse* resp);
  grpc::Status ReleaseJob(const v1::ReleaseJobRequest& req);

 private:
  class LeaseCall;

  // The long-poll of one LeaseJob call; `call` tells whether its caller is still there.
  grpc::Status LeaseJob(LeaseCall& call, const v1::LeaseJobRequest& req, v1::LeaseJobResponse* resp);
  // Puts a job leased for a reply that could not be delivered straight back in the queue.
  void ReturnUndeliveredLease(int64_t job_id, const std::string& worker_id);
  // Wakes every waiting long-poll (without changing the queue generation).
  void WakeLongPolls() {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }

  void RefreshLoop();
  void RefreshIndex();
  void RefreshGauges();
  void ExpireLeases();
  void NotifyQueue() {
    std::lock_guard<std::mutex> lock(mu_);
    ++queue_generation_;
    cv_.notify_all();
  }
  std::optional<WorkerRecord> FindWorker(const std::string& worker_id) {
    std::lock_guard<std::mutex> lock(workers_mu_);
    auto it = workers_.find(worker_id);
    if (it == workers_.end()) return std::nullopt;
    return it->second;
  }
  // Prepares a freshly leased job for the worker: creates its run on the first lease and
  // fills the response from the stored spec.
  grpc::Status FillLease(Job job, const WorkerRecord& worker, v1::LeaseJobResponse* resp);
  // OK when `run_id` belongs to a job leased by `worker_id`; `*job` is that job.
  grpc::Status CheckRunHeldBy(int64_t run_id, const std::string& worker_id, Job* job);
  grpc::Status FlushTrials(std::vector<Trial>* batch, int64_t* inserted);
  absl::Status ComputeBestConfigs(const Job& job);

  const ServerOptions options_;
  const std::string token_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<ServiceMetrics> metrics_;
  Slots long_polls_;
  Slots streams_;

  // Best-config snapshot, swapped whole.
  std::mutex refresh_mu_;  // serialises RefreshIndex
  std::mutex index_mu_;
  std::shared_ptr<const BestConfigIndex> index_;

  // Queue wake-ups and shutdown.
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t queue_generation_ = 0;
  bool shutting_down_ = false;

  std::mutex workers_mu_;
  std::map<std::string, WorkerRecord> workers_;
  std::mutex runs_mu_;
  std::map<int64_t, int64_t> run_to_job_;

  // LeaseJob long-poll threads still running; Shutdown waits for them.
  std::mutex poll_threads_mu_;
  std::condition_variable poll_threads_cv_;
  int poll_threads_ = 0;

  // Services before the server: members die in reverse order, and gRPC needs its services
  // to outlive the server object.
  std::vector<std::unique_ptr<grpc::Service>> services_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::thread refresher_;
  std::once_flag shutdown_once_;
};

// ------------------------------------------------------------------------------ services

namespace {

class TuningServiceImpl final : public v1::TuningService::Service {
 public:
  explicit TuningServiceImpl(Server::Impl* impl) : impl_(impl) {}

  grpc::Status GetBestConfig(grpc::ServerContext* ctx, const v1::GetBestConfigRequest* req,
                             v1::GetBestConfigResponse* resp) override {
    return impl_->Handle("GetBestConfig", [&] {
      if (auto s = impl_->AuthenticateRead(ctx); !s.ok()) return s;
      return impl_->GetBestConfig(*req, resp);
    });
  }
  grpc::Status BatchGetBestConfig(grpc::ServerContext* ctx, const v1::BatchGetBestConfigRequest* req,
                                  v1::BatchGetBestConfigResponse* resp) override {
    return impl_->Handle("BatchGetBestConfig", [&] {
      if (auto s = impl_->AuthenticateRead(ctx); !s.ok()) return s;
      if (req->requests_size() > kMaxBatchLookups) {
        return Invalid(Cat("requests: at most ", kMaxBatchLookups, " per call, got ", req->requests_size()));
      }
      for (const auto& r : req->requests()) {
        auto* entry = resp->add_entries();
        grpc::Status s = impl_->GetBestConfig(r, entry->mutable_response());
        if (!s.ok()) {
          entry->clear_response();
          entry->set_error(s.error_message());
        }
      }
      return grpc::Status::OK;
    });
  }
  grpc::Status SubmitTuningJob(grpc::ServerContext* ctx, const v1::SubmitTuningJobRequest* req,
                               v1::SubmitTuningJobResponse* resp) override {
    return impl_->Handle("SubmitTuningJob", [&] {
      if (auto s = impl_->Authenticate(ctx); !s.ok()) return s;
      return impl_->SubmitTuningJob(*req, resp);
    });
  }
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req, v1::Job* resp) override {
    return impl_->Handle("GetJob", [&] {
      if (auto s = impl_->AuthenticateRead(ctx); !s.ok()) return s;
      return impl_->GetJob(*req, resp);
    });
  }
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override {
    return impl_->Handle("ListJobs", [&] {
      if (auto s = impl_->AuthenticateRead(ctx); !s.ok()) return s;
      return impl_->ListJobs(*req, resp);
    });
  }
  grpc::Status ListTrials(grpc::ServerContext* ctx, const v1::ListTrialsRequest* req,
                          v1::ListTrialsResponse* resp) override {
    return impl_->Handle("ListTrials", [&] {
      if (auto s = impl_->AuthenticateRead(ctx); !s.ok()) return s;
      return impl_->ListTrials(*req, resp);
    });
  }
  grpc::Status ListRegressions(grpc::ServerContext* ctx, const v1::ListRegressionsRequest* req,
                               v1::ListRegressionsResponse* resp) override {
    return impl_->Handle("ListRegressions", [&] {
      if (auto s = impl_->AuthenticateRead(ctx); !s.ok()) return s;
      return impl_->ListRegressions(*req, resp);
    });
  }
  grpc::Status ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest* req,
                           v1::ListWorkersResponse* resp) override {
    return impl_->Handle("ListWorkers", [&] {
      if (auto s = impl_->AuthenticateRead(ctx); !s.ok()) return s;
      return impl_->ListWorkers(*req, resp);
    });
  }
  grpc::Status ListAudits(grpc::ServerContext* ctx, const v1::ListAuditsRequest* req,
                          v1::ListAuditsResponse* resp) override {
    return impl_->Handle("ListAudits", [&] {
      if (auto s = impl_->AuthenticateRead(ctx); !s.ok()) return s;
      return impl_->ListAudits(*req, resp);
    });
  }

 private:
  Server::Impl* impl_;
};

// LeaseJob alone uses the callback API (see Server::Impl::LeaseCall); the rest is sync.
class WorkerServiceImpl final : public v1::WorkerService::WithCallbackMethod_LeaseJob<v1::WorkerService::Service> {
 public:
  explicit WorkerServiceImpl(Server::Impl* impl) : impl_(impl) {}

  grpc::Status RegisterWorker(grpc::ServerContext* ctx, const v1::RegisterWorkerRequest* req,
                              v1::RegisterWorkerResponse* resp) override {
    return impl_->Handle("RegisterWorker", [&] {
      if (auto s = impl_->Authenticate(ctx); !s.ok()) return s;
      return impl_->RegisterWorker(*req, resp);
    });
  }
  grpc::ServerUnaryReactor* LeaseJob(grpc::CallbackServerContext* ctx, const v1::LeaseJobRequest* req,
                                     v1::LeaseJobResponse* resp) override {
    return impl_->StartLeaseJob(ctx, req, resp);
  }
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    return impl_->Handle("Heartbeat", [&] {
      if (auto s = impl_->Authenticate(ctx); !s.ok()) return s;
      return impl_->Heartbeat(ctx, *req, resp);
    });
  }
  grpc::Status ReportTrials(grpc::ServerContext* ctx, grpc::ServerReader<v1::Trial>* reader,
                            v1::ReportTrialsResponse* resp) override {
    return impl_->Handle("ReportTrials", [&] {
      if (auto s = impl_->Authenticate(ctx); !s.ok()) return s;
      return impl_->ReportTrials(ctx, reader, resp);
    });
  }
  grpc::Status CompleteJob(grpc::ServerContext* ctx, const v1::CompleteJobRequest* req,
                           v1::CompleteJobResponse*) override {
    return impl_->Handle("CompleteJob", [&] {
      if (auto s = impl_->Authenticate(ctx); !s.ok()) return s;
      return impl_->CompleteJob(*req);
    });
  }
  grpc::Status ReportAudit(grpc::ServerContext* ctx, const v1::ReportAuditRequest* req,
                           v1::ReportAuditResponse* resp) override {
    return impl_->Handle("ReportAudit", [&] {
      if (auto s = impl_->Authenticate(ctx); !s.ok()) return s;
      return impl_->ReportAudit(ctx, *req, resp);
    });
  }
  grpc::Status ReleaseJob(grpc::ServerContext* ctx, const v1::ReleaseJobRequest* req,
                          v1::ReleaseJobResponse*) override {
    return impl_->Handle("ReleaseJob", [&] {
      if (auto s = impl_->Authenticate(ctx); !s.ok()) return s;
      return impl_->ReleaseJob(*req);
    });
  }

 private:
  Server::Impl* impl_;
};

}  // namespace

// ------------------------------------------------------------------------------ lifecycle

absl::Status Server::Impl::Init() {
  auto workers = store_->ListWorkers();
  if (!workers.ok()) return workers.status();
  {
    std::lock_guard<std::mutex> lock(workers_mu_);
    for (auto& w : *workers) workers_[w.worker_id] = std::move(w);
  }
  ExpireLeases();
  RefreshIndex();
  RefreshGauges();
  return absl::OkStatus();
}

absl::Status Server::Impl::StartGrpc() {
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!options_.tls_cert_file.empty()) {
    auto cert = ReadWholeFile(options_.tls_cert_file, "TLS certificate");
    if (!cert.ok()) return cert.status();
    auto key = ReadWholeFile(options_.tls_key_file, "TLS key");
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    creds = grpc::SslServerCredentials(ssl);
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen_address, creds, &port_);
  services_.push_back(std::make_unique<TuningServiceImpl>(this));
  services_.push_back(std::make_unique<WorkerServiceImpl>(this));
  for (auto& s : services_) builder.RegisterService(s.get());
  builder.SetMaxReceiveMessageSize(options_.max_receive_message_bytes);
  // gRPC sets SO_REUSEPORT by default: a second server would silently share a taken port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  grpc::ResourceQuota quota("fusetune-server");
  quota.SetMaxThreads(options_.max_threads);
  builder.SetResourceQuota(quota);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    server_.reset();
    return absl::UnavailableError(
        Cat("cannot listen on '", options_.listen_address, "' (address in use or invalid?)"));
  }
  if (auto* health = server_->GetHealthCheckService(); health != nullptr) {
    // The whole server ("") and each service by its full proto name; Shutdown turns them
    // all NOT_SERVING.
    health->SetServingStatus(true);
    for (const char* service : {v1::TuningService::service_full_name(), v1::WorkerService::service_full_name()}) {
      health->SetServingStatus(service, true);
    }
  }
  refresher_ = std::thread([this] { RefreshLoop(); });
  return absl::OkStatus();
}

void Server::Impl::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutting_down_ = true;
      cv_.notify_all();
    }
    if (server_ != nullptr) {
      if (auto* health = server_->GetHealthCheckService(); health != nullptr) {
        health->SetServingStatus(false);
      }
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    }
    {
      // Every long-poll saw shutting_down_ and is finishing; none starts after the server stopped.
      std::unique_lock<std::mutex> lock(poll_threads_mu_);
      poll_threads_cv_.wait(lock, [&] { return poll_threads_ == 0; });
    }
    if (refresher_.joinable()) refresher_.join();
  });
}

void Server::Impl::RefreshLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!shutting_down_) {
    cv_.wait_for(lock, std::chrono::milliseconds(options_.refresh_ms), [&] { return shutting_down_; });
    if (shutting_down_) break;
    lock.unlock();
    ExpireLeases();
    RefreshIndex();
    RefreshGauges();
    lock.lock();
  }
}

void Server::Impl::ExpireLeases() {
  auto n = store_->ExpireLeases(NowUnixMs());
  if (n.ok() && *n > 0) NotifyQueue();
}

void Server::Impl::RefreshIndex() {
  // Load and swap under one lock: a refresh that read the table before an upsert can never
  // replace the snapshot of a refresh that read it after.
  std::lock_guard<std::mutex> refresh_lock(refresh_mu_);
  auto best = store_->ListBestConfigs();
  if (!best.ok()) return;  // keep serving the previous snapshot
  metrics_->SetBestConfigs(*best);
  auto index = std::make_shared<const BestConfigIndex>(BestConfigIndex::Build(std::move(*best)));
  std::lock_guard<std::mutex> lock(index_mu_);
  index_ = std::move(index);
}

void Server::Impl::RefreshGauges() {
  if (auto counts = store_->CountJobsByState(); counts.ok()) {
    std::vector<std::pair<std::string, int64_t>> by_state;
    for (const auto& [state, n] : *counts) by_state.emplace_back(std::string(JobStateName(state)), n);
    metrics_->SetJobCounts(by_state);
  }
  if (auto workers = store_->ListWorkers(); workers.ok()) {
    const int64_t now = NowUnixMs();
    int64_t alive = 0;
    for (const auto& w : *workers) {
      if (now - w.last_heartbeat_unix_ms <= options_.worker_alive_ms) ++alive;
    }
    metrics_->SetWorkers(static_cast<int64_t>(workers->size()), alive);
  }
}

// ------------------------------------------------------------------------------ TuningService

grpc::Status Server::Impl::GetBestConfig(const v1::GetBestConfigRequest& req,
                                         v1::GetBestConfigResponse* resp) {
  if (auto s = ValidateDeviceClass(req.device_class()); !s.ok()) return ToGrpcStatus(s);
  auto problem = ProblemFromProto(req.problem());
  if (!problem.ok()) return ToGrpcStatus(problem.status());
  std::shared_ptr<const BestConfigIndex> index;
  {
    std::lock_guard<std::mutex> lock(index_mu_);
    index = index_;
  }
  auto answer = index->Lookup(*problem, req.device_class());
  if (!answer.ok()) return ToGrpcStatus(answer.status());
  AnswerToProto(*answer, resp);
  return grpc::Status::OK;
}

grpc::Status Server::Impl::SubmitTuningJob(const v1::SubmitTuningJobRequest& req,
                                           v1::SubmitTuningJobResponse* resp) {
  if (req.problems_size() < 1 || req.problems_size() > kMaxJobProblems) {
    return Invalid(Cat("problems: 1..", kMaxJobProblems, " per job, got ", req.problems_size()));
  }
  if (auto s = ValidateDeviceClass(req.device_class()); !s.ok()) return ToGrpcStatus(s);
  if (auto s = CheckCommit(req.commit()); !s.ok()) return s;
  if (req.max_trials() < 0 || req.max_trials() > 1000000) {
    return Invalid("max_trials: must be in [0, 1000000] (0 = exhaustive)");
  }
  if (!std::isfinite(req.max_seconds()) || req.max_seconds() < 0 || req.max_seconds() > 7 * 86400) {
    return Invalid("max_seconds: must be finite, in [0, 604800] (0 = unbounded)");
  }
  if (req.variants_size() > 3) return Invalid("variants: at most 3");
  for (const auto& v : req.variants()) {
    if (!ParseVariant(v).ok()) return Invalid(Cat("variants: unknown variant '", v.substr(0, 64), "'"));
  }
  if (req.kind() != v1::JOB_KIND_TUNE && req.kind() != v1::JOB_KIND_AUDIT) {
    return Invalid(Cat("kind: unknown job kind ", static_cast<int>(req.kind())));
  }
  if (req.precisions_size() > 4) return Invalid("precisions: at most 4");
  for (const auto& p : req.precisions()) {
    if (!ParsePrecision(p).ok()) return Invalid(Cat("precisions: unknown precision '", p.substr(0, 64), "'"));
  }
  Job job;
  std::set<std::string> seen;
  for (int i = 0; i < req.problems_size(); ++i) {
    auto problem = JobProblemFromProto(req.problems(i));
    if (!problem.ok()) {
      return Invalid(Cat("problems[", i, "]: ", problem.status().message()));
    }
    std::string key = problem->Key();
    if (!seen.insert(key).second) return Invalid(Cat("problems[", i, "]: duplicate of ", key));
    job.problem_keys.push_back(std::move(key));
  }
  // The spec is the request itself (full problems with their length lists), as JSON.
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  if (auto s = google::protobuf::util::MessageToJsonString(req, &job.spec_json, print); !s.ok()) {
    return grpc::Status(grpc::StatusCode::INTERNAL, Cat("cannot encode job spec: ", s.ToString()));
  }
  job.state = JobState::kQueued;
  job.device_class = req.device_class();
  job.commit = req.commit();
  job.max_trials = req.max_trials();
  job.max_seconds = req.max_seconds();
  job.created_unix_ms = NowUnixMs();
  auto id = store_->EnqueueJob(job);
  if (!id.ok()) return ToGrpcStatus(id.status());
  resp->set_job_id(*id);
  NotifyQueue();
  RefreshGauges();
  return grpc::Status::OK;
}

grpc::Status Server::Impl::GetJob(const v1::GetJobRequest& req, v1::Job* resp) {
  if (req.job_id() <= 0) return Invalid("job_id: must be > 0");
  auto job = store_->GetJob(req.job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  JobToProto(*job, resp);
  if (job->run_id > 0) {
    // Counted in SQL: GetJob is polled by `submit --wait`, and a run can hold many trials.
    auto count = store_->CountTrials(job->run_id);
    if (!count.ok()) return ToGrpcStatus(count.status());
    resp->set_trials_recorded(*count);
  }
  return grpc::Status::OK;
}

grpc::Status Server::Impl::ListJobs(const v1::ListJobsRequest& req, v1::ListJobsResponse* resp) {
  std::optional<JobState> state;
  if (!req.state().empty()) {
    state = ParseJobState(req.state());
    if (!state) return Invalid(Cat("state: unknown '", req.state().substr(0, 64), "' (queued, leased, done, failed)"));
  }
  if (req.limit() < 0 || req.limit() > 1000) return Invalid("limit: must be in [1, 1000] (0 = 100)");
  const int limit = req.limit() == 0 ? 100 : req.limit();
  auto jobs = store_->ListJobs(state, limit);
  if (!jobs.ok()) return ToGrpcStatus(jobs.status());
  for (const Job& j : *jobs) JobToProto(j, resp->add_jobs());
  return grpc::Status::OK;
}

grpc::Status Server::Impl::ListTrials(const v1::ListTrialsRequest& req, v1::ListTrialsResponse* resp) {
  if (req.run_id() < 0) return Invalid("run_id: must be >= 0");
  if (req.limit() < 0 || req.limit() > 10000) return Invalid("limit: must be in [1, 10000] (0 = 1000)");
  if (auto s = CheckText(req.problem_key(), kMaxKeyLength, "problem_key"); !s.ok()) return s;
  const int limit = req.limit() == 0 ? 1000 : req.limit();
  absl::StatusOr<std::vector<Trial>> trials;
  if (req.run_id() > 0) {
    trials = store_->ListTrials(req.run_id(), req.problem_key());
  } else {
    if (req.problem_key().empty() || req.device_class().empty()) {
      return Invalid("give run_id, or problem_key with device_class");
    }
    if (auto s = ValidateDeviceClass(req.device_class()); !s.ok()) return ToGrpcStatus(s);
    trials = store_->ListTrialsForProblem(req.device_class(), req.problem_key(), limit + 1);
  }
  if (!trials.ok()) return ToGrpcStatus(trials.status());
  size_t bytes = 0;
  for (const Trial& t : *trials) {
    if (resp->trials_size() >= limit) {
      resp->set_truncated(true);
      break;
    }
    v1::Trial* out = resp->add_trials();
    TrialToProto(t, out);
    bytes += out->ByteSizeLong();
    if (bytes > kMaxListTrialsBytes) {
      resp->mutable_trials()->RemoveLast();
      resp->set_truncated(true);
      break;
    }
  }
  return grpc::Status::OK;
}

grpc::Status Server::Impl::ListRegressions(const v1::ListRegressionsRequest& req,
                                           v1::ListRegressionsResponse* resp) {
  if (auto s = CheckCommit(req.commit()); !s.ok()) return s;
  if (req.limit() < 0 || req.limit() > 1000) return Invalid("limit: must be in [1, 1000] (0 = 100)");
  auto regressions = store_->ListRegressions(req.commit(), req.limit() == 0 ? 100 : req.limit());
  if (!regressions.ok()) return ToGrpcStatus(regressions.status());
  for (const Regression& r : *regressions) RegressionToProto(r, resp->add_regressions());
  return grpc::Status::OK;
}

grpc::Status Server::Impl::ListWorkers(const v1::ListWorkersRequest& req, v1::ListWorkersResponse* resp) {
  if (req.limit() < 0 || req.limit() > 10000) return Invalid("limit: must be in [1, 10000] (0 = 1000)");
  const size_t limit = req.limit() == 0 ? 1000 : static_cast<size_t>(req.limit());
  auto workers = store_->ListWorkers();
  if (!workers.ok()) return ToGrpcStatus(workers.status());
  auto leased = store_->ListJobs(JobState::kLeased, 100000);
  if (!leased.ok()) return ToGrpcStatus(leased.status());
  std::map<std::string, std::vector<const Job*>> held;  // worker id -> its leased jobs
  for (const Job& j : *leased) held[j.leased_by].push_back(&j);
  std::sort(workers->begin(), workers->end(),
            [](const WorkerRecord& a, const WorkerRecord& b) { return a.worker_id < b.worker_id; });
  const int64_t now = NowUnixMs();
  for (const WorkerRecord& w : *workers) {
    if (static_cast<size_t>(resp->workers_size()) >= limit) {
      resp->set_truncated(true);
      break;
    }
    v1::WorkerStatus* out = resp->add_workers();
    out->set_worker_id(w.worker_id);
    out->set_host(w.host);
    out->set_device_class(w.device_class);
    out->set_backend(w.backend);
    v1::DeviceInfo device;
    if (google::protobuf::util::JsonStringToMessage(w.device_json, &device).ok()) {
      out->set_device_name(device.name());
      out->set_device_index(device.device_index());
    }
    out->set_registered_unix_ms(w.registered_unix_ms);
    out->set_last_seen_unix_ms(w.last_heartbeat_unix_ms);
    out->set_alive(now - w.last_heartbeat_unix_ms <= options_.worker_alive_ms);
    if (auto it = held.find(w.worker_id); it != held.end()) {
      std::vector<const Job*>& jobs = it->second;
      std::sort(jobs.begin(), jobs.end(), [](const Job* a, const Job* b) { return a->job_id < b->job_id; });
      int64_t expiry = 0;
      for (const Job* j : jobs) {
        out->add_leased_job_ids(j->job_id);
        if (expiry == 0 || j->lease_expiry_unix_ms < expiry) expiry = j->lease_expiry_unix_ms;
      }
      out->set_lease_expiry_unix_ms(expiry);
    }
  }
  resp->set_now_unix_ms(now);
  resp->set_alive_window_ms(options_.worker_alive_ms);
  return grpc::Status::OK;
}

grpc::Status Server::Impl::ListAudits(const v1::ListAuditsRequest& req, v1::ListAuditsResponse* resp) {
  if (!req.device_class().empty()) {
    if (auto s = ValidateDeviceClass(req.device_class()); !s.ok()) return ToGrpcStatus(s);
  }
  if (auto s = CheckText(req.problem_key(), kMaxKeyLength, "problem_key"); !s.ok()) return s;
  if (req.limit() < 0 || req.limit() > 1000) return Invalid("limit: must be in [1, 1000] (0 = 100)");
  auto audits = store_->ListAudits(req.device_class(), req.problem_key(), req.limit() == 0 ? 100 : req.limit());
  if (!audits.ok()) return ToGrpcStatus(audits.status());
  for (const AuditSummary& a : *audits) AuditSummaryToProto(a, resp->add_audits());
  return grpc::Status::OK;
}

// ------------------------------------------------------------------------------ WorkerService

grpc::Status Server::Impl::RegisterWorker(const v1::RegisterWorkerRequest& req,
                                          v1::RegisterWorkerResponse* resp) {
  if (auto s = ValidateId(req.worker_id(), "worker_id"); !s.ok()) return ToGrpcStatus(s);
  if (auto s = CheckText(req.host(), kMaxKeyLength, "host"); !s.ok()) return s;
  if (!req.has_device()) return Invalid("device: required");
  auto device = DeviceInfoFromProto(req.device());
  if (!device.ok()) return ToGrpcStatus(device.status());
  const std::string device_class =
      req.device().device_class().empty() ? device->DeviceClass() : req.device().device_class();
  if (auto s = ValidateDeviceClass(device_class); !s.ok()) return ToGrpcStatus(s);
  v1::DeviceInfo stored;
  DeviceInfoToProto(*device, &stored);
  stored.set_device_class(device_class);
  WorkerRecord w;
  w.worker_id = req.worker_id();
  w.host = req.host();
  w.backend = device->backend;
  w.device_class = device_class;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  if (auto s = google::protobuf::util::MessageToJsonString(stored, &w.device_json, print); !s.ok()) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "cannot encode device info");
  }
  const int64_t now = NowUnixMs();
  w.registered_unix_ms = now;
  w.last_heartbeat_unix_ms = now;
  if (auto s = store_->UpsertWorker(w); !s.ok()) return ToGrpcStatus(s);
  {
    std::lock_guard<std::mutex> lock(workers_mu_);
    workers_[w.worker_id] = w;
  }
  resp->set_lease_ms(options_.lease_ms);
  resp->set_heartbeat_ms(options_.heartbeat_ms);
  RefreshGauges();
  return grpc::Status::OK;
}

// One LeaseJob call. The callback API is used for it because, unlike the sync API, it tells
// the server how a call ended: OnCancel when the caller is gone (cancelled, past its deadline,
// disconnected) and, in OnDone, whether the reply was delivered. A long-poll waits up to 30 s,
// which must not block gRPC's callback threads, so each call runs on a thread of its own
// (at most max_concurrent_long_polls at once; StartLeaseJob refuses the others, and
// unauthenticated calls, without a thread).
//
// Lifetime: created by StartLeaseJob, deleted by OnDone (after Finish; gRPC guarantees
// OnDone is the last callback). Thread-safety: Run on its thread; OnCancel/OnDone on gRPC's.
class Server::Impl::LeaseCall final : public grpc::ServerUnaryReactor {
 public:
  LeaseCall(Impl* impl, grpc::CallbackServerContext* ctx, const v1::LeaseJobRequest* req,
            v1::LeaseJobResponse* resp)
      : impl_(impl), ctx_(ctx), req_(req), resp_(resp) {}

  grpc::CallbackServerContext* context() { return ctx_; }

  // Runs the long-poll (of an authenticated call holding a long-poll slot) and finishes the
  // call; `this` may be deleted once it returns.
  void Run() {
    grpc::Status status = impl_->Handle("LeaseJob", [&] { return impl_->LeaseJob(*this, *req_, resp_); });
    if (!status.ok()) resp_->Clear();
    impl_->long_polls_.Release();  // before the reply: the caller's next poll may come at once
    Finish(status);
  }

  // True once nobody will read the reply: the call was cancelled (by the client, a
  // disconnect or gRPC) or the caller's deadline has passed.
  bool gone() const {
    return cancelled_.load() || ctx_->IsCancelled() || std::chrono::system_clock::now() >= ctx_->deadline();
  }
  // Why the caller is gone (for the call's status; it is rarely read by anyone).
  grpc::Status GoneStatus() const {
    if (cancelled_.load() || ctx_->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "call cancelled");
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the caller's deadline passed");
  }
  // Set once a job is leased for this reply; OnDone gives it back if the reply is lost.
  void set_leased_job(int64_t job_id) { leased_job_id_ = job_id; }

  void OnCancel() override {
    cancelled_.store(true);
    impl_->WakeLongPolls();
  }
  void OnDone() override {
    // A call that ends cancelled did not deliver its reply (the client went away or its
    // deadline passed before the reply was sent): its job goes back to the queue now rather
    // than after the lease. (A reply lost after it left this server is not seen here; the
    // lease expiry covers that.)
    if (leased_job_id_ != 0 && ctx_->IsCancelled()) impl_->ReturnUndeliveredLease(leased_job_id_, req_->worker_id());
    delete this;
  }

 private:
  Impl* const impl_;
  grpc::CallbackServerContext* const ctx_;
  const v1::LeaseJobRequest* const req_;
  v1::LeaseJobResponse* const resp_;
  std::atomic<bool> cancelled_{false};
  int64_t leased_job_id_ = 0;
};

grpc::ServerUnaryReactor* Server::Impl::StartLeaseJob(grpc::CallbackServerContext* ctx,
                                                      const v1::LeaseJobRequest* req, v1::LeaseJobResponse* resp) {
  auto* call = new LeaseCall(this, ctx, req, resp);
  // Refusals that need no waiting are answered here, so that only authenticated calls within
  // the long-poll cap get a thread.
  grpc::Status refused = Authenticate(ctx);
  if (refused.ok() && !long_polls_.Acquire()) {
    refused = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                           Cat("too many concurrent LeaseJob long-polls (", options_.max_concurrent_long_polls,
                               "); retry later"));
  }
  if (!refused.ok()) {
    metrics_->ObserveRpc("LeaseJob", refused.error_code(), 0.0);
    call->Finish(refused);
    return call;
  }
  {
    std::lock_guard<std::mutex> lock(poll_threads_mu_);
    ++poll_threads_;
  }
  try {
    std::thread([this, call] {
      call->Run();
      // Notified at thread exit, so that Shutdown (and the destructor) never outrun it.
      std::unique_lock<std::mutex> lock(poll_threads_mu_);
      --poll_threads_;
      std::notify_all_at_thread_exit(poll_threads_cv_, std::move(lock));
    }).detach();
  } catch (const std::system_error&) {
    long_polls_.Release();
    {
      std::lock_guard<std::mutex> lock(poll_threads_mu_);
      --poll_threads_;
    }
    poll_threads_cv_.notify_all();
    call->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "cannot start a long-poll thread; retry later"));
  }
  return call;
}

void Server::Impl::ReturnUndeliveredLease(int64_t job_id, const std::string& worker_id) {
  // FailedPrecondition: the lease already ended otherwise (expired, or released): nothing to do.
  if (store_->ReleaseJob(job_id, worker_id).ok()) {
    NotifyQueue();
    RefreshGauges();
  }
}

namespace {

grpc::Status WorkerNotRegistered(grpc::ServerContextBase* ctx, const std::string& worker_id) {
  ctx->AddTrailingMetadata(kErrorReasonMetadata, kReasonWorkerNotRegistered);
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      Cat("worker '", worker_id, "' is not registered (RegisterWorker first)"));
}

}  // namespace

grpc::Status Server::Impl::LeaseJob(LeaseCall& call, const v1::LeaseJobRequest& req, v1::LeaseJobResponse* resp) {
  if (auto s = ValidateId(req.worker_id(), "worker_id"); !s.ok()) return ToGrpcStatus(s);
  if (req.wait_ms() < 0 || req.wait_ms() > kMaxLeaseWaitMs) {
    return Invalid(Cat("wait_ms: must be in [0, ", kMaxLeaseWaitMs, "]"));
  }
  auto worker = FindWorker(req.worker_id());
  if (!worker) return WorkerNotRegistered(call.context(), req.worker_id());
  if (!req.device_class().empty() && req.device_class() != worker->device_class) {
    if (auto s = ValidateDeviceClass(req.device_class()); !s.ok()) return ToGrpcStatus(s);
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        Cat("device_class '", req.device_class(), "' differs from the worker's registered '",
                            worker->device_class, "'"));
  }
  // The wait ends after wait_ms or at the caller's own deadline, whichever comes first.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(req.wait_ms());
  if (const auto caller = call.context()->deadline(); caller != std::chrono::system_clock::time_point::max()) {
    deadline = std::min(deadline, std::chrono::steady_clock::now() +
                                      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                          caller - std::chrono::system_clock::now()));
  }
  uint64_t tried_generation = 0;
  bool tried = false;
  while (true) {
    uint64_t generation;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shutting_down_) {
        resp->set_leased(false);
        return grpc::Status::OK;
      }
      generation = queue_generation_;
    }
    // Never take a job for a caller that cannot receive it.
    if (call.gone()) return call.GoneStatus();
    // The store is asked again only when the queue may have changed (a submit, a release,
    // or leases expired by the background refresh all bump the generation).
    if (!tried || generation != tried_generation) {
      tried = true;
      tried_generation = generation;
      auto job = store_->LeaseJob(req.worker_id(), worker->device_class, NowUnixMs(), options_.lease_ms);
      if (job.ok()) {
        const int64_t job_id = job->job_id;
        grpc::Status filled = FillLease(std::move(*job), *worker, resp);
        if (!filled.ok()) return filled;
        if (call.gone()) {  // went away while the job was being prepared
          ReturnUndeliveredLease(job_id, req.worker_id());
          return call.GoneStatus();
        }
        call.set_leased_job(job_id);
        return grpc::Status::OK;
      }
      if (!absl::IsNotFound(job.status())) return ToGrpcStatus(job.status());
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      resp->set_leased(false);
      return grpc::Status::OK;
    }
    // Woken by a queue change, a shutdown or the call's cancellation (OnCancel).
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, deadline, [&] {
      return shutting_down_ || queue_generation_ != tried_generation || call.gone();
    });
  }
}

grpc::Status Server::Impl::FillLease(Job job, const WorkerRecord& worker, v1::LeaseJobResponse* resp) {
  auto spec = JobSpec(job);
  if (!spec.ok()) {
    // A spec that cannot be read will never run: fail the job rather than lease it forever.
    (void)store_->CompleteJob(job.job_id, worker.worker_id, false, "stored job spec is unreadable", NowUnixMs());
    return ToGrpcStatus(spec.status());
  }
  // An audit re-measures the best config recorded now: looked up at each lease, so a job
  // resumed after a lapse audits what the store holds then.
  std::vector<std::string> recorded_keys;
  if (spec->kind() == v1::JOB_KIND_AUDIT) {
    for (const std::string& key : job.problem_keys) {
      auto best = store_->GetBestConfig(job.device_class, key);
      if (best.ok()) {
        recorded_keys.push_back(best->config_key);
      } else if (absl::IsNotFound(best.status())) {
        recorded_keys.emplace_back();
      } else {
        (void)store_->ReleaseJob(job.job_id, worker.worker_id);
        NotifyQueue();
        return ToGrpcStatus(best.status());
      }
    }
  }
  if (job.run_id == 0) {
    RunInfo run;
    run.commit = job.commit;
    run.host = worker.host;
    v1::DeviceInfo device_proto;
    if (google::protobuf::util::JsonStringToMessage(worker.device_json, &device_proto).ok()) {
      if (auto d = DeviceInfoFromProto(device_proto); d.ok()) run.device = *d;
    }
    run.tool_version = FUSETUNE_VERSION_STRING;
    run.label = Cat("job:", job.job_id);
    run.environment = Cat("worker:", worker.worker_id);
    run.started_unix_ms = NowUnixMs();
    auto run_id = store_->BeginRun(run);
    absl::Status set = run_id.ok() ? store_->SetJobRun(job.job_id, *run_id) : run_id.status();
    if (!set.ok()) {
      (void)store_->ReleaseJob(job.job_id, worker.worker_id);
      NotifyQueue();
      return ToGrpcStatus(set);
    }
    job.run_id = *run_id;
  }
  {
    std::lock_guard<std::mutex> lock(runs_mu_);
    run_to_job_[job.run_id] = job.job_id;
  }
  (void)store_->TouchWorker(worker.worker_id, NowUnixMs());
  resp->set_leased(true);
  JobToProto(job, resp->mutable_job());
  *resp->mutable_problems() = spec->problems();
  resp->set_max_trials(spec->max_trials());
  resp->set_max_seconds(spec->max_seconds());
  *resp->mutable_variants() = spec->variants();
  *resp->mutable_precisions() = spec->precisions();
  for (std::string& key : recorded_keys) resp->add_recorded_config_keys(std::move(key));
  RefreshGauges();
  return grpc::Status::OK;
}

grpc::Status Server::Impl::Heartbeat(grpc::ServerContextBase* ctx, const v1::HeartbeatRequest& req,
                                     v1::HeartbeatResponse* resp) {
  if (auto s = ValidateId(req.worker_id(), "worker_id"); !s.ok()) return ToGrpcStatus(s);
  if (req.job_id() < 0) return Invalid("job_id: must be >= 0 (0 = idle)");
  if (!FindWorker(req.worker_id())) return WorkerNotRegistered(ctx, req.worker_id());
  const int64_t now = NowUnixMs();
  if (auto s = store_->TouchWorker(req.worker_id(), now); !s.ok()) return ToGrpcStatus(s);
  {
    std::lock_guard<std::mutex> lock(workers_mu_);
    if (auto it = workers_.find(req.worker_id()); it != workers_.end()) {
      it->second.last_heartbeat_unix_ms = now;
    }
  }
  if (req.job_id() == 0) {
    resp->set_lease_valid(false);
    return grpc::Status::OK;
  }
  absl::Status renewed = store_->RenewLease(req.job_id(), req.worker_id(), now, options_.lease_ms);
  if (renewed.ok()) {
    resp->set_lease_valid(true);
  } else if (absl::IsFailedPrecondition(renewed) || absl::IsNotFound(renewed)) {
    resp->set_lease_valid(false);
  } else {
    return ToGrpcStatus(renewed);
  }
  return grpc::Status::OK;
}

grpc::Status Server::Impl::CheckRunHeldBy(int64_t run_id, const std::string& worker_id, Job* held) {
  std::optional<int64_t> job_id;
  {
    std::lock_guard<std::mutex> lock(runs_mu_);
    if (auto it = run_to_job_.find(run_id); it != run_to_job_.end()) job_id = it->second;
  }
  if (!job_id) {
    // Leased before this server started: look through the leased jobs once.
    auto leased = store_->ListJobs(JobState::kLeased, 100000);
    if (!leased.ok()) return ToGrpcStatus(leased.status());
    std::lock_guard<std::mutex> lock(runs_mu_);
    for (const Job& j : *leased) {
      if (j.run_id > 0) run_to_job_[j.run_id] = j.job_id;
      if (j.run_id == run_id) job_id = j.job_id;
    }
  }
  if (job_id) {
    auto job = store_->GetJob(*job_id);
    if (!job.ok()) return ToGrpcStatus(job.status());
    if (job->state == JobState::kLeased && job->leased_by == worker_id) {
      *held = std::move(*job);
      return grpc::Status::OK;
    }
  }
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      Cat("run ", run_id, " is not the run of a job leased by worker '", worker_id, "'"));
}

grpc::Status Server::Impl::FlushTrials(std::vector<Trial>* batch, int64_t* inserted) {
  std::vector<Trial> fresh;
  std::set<std::string> ids;
  for (Trial& t : *batch) {
    if (!ids.insert(t.trial_id).second) continue;
    auto has = store_->HasTrial(t.trial_id);
    if (!has.ok()) return ToGrpcStatus(has.status());
    if (!*has) fresh.push_back(std::move(t));
  }
  batch->clear();
  if (fresh.empty()) return grpc::Status::OK;
  if (auto s = store_->RecordTrials(fresh); !s.ok()) return ToGrpcStatus(s);
  *inserted += static_cast<int64_t>(fresh.size());
  return grpc::Status::OK;
}

grpc::Status Server::Impl::ReportTrials(grpc::ServerContext* ctx, grpc::ServerReader<v1::Trial>* reader,
                                        v1::ReportTrialsResponse* resp) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(kWorkerIdMetadata);
  if (it == md.end()) {
    return Invalid(Cat("missing '", kWorkerIdMetadata, "' metadata naming the uploading worker"));
  }
  const std::string worker_id(it->second.data(), it->second.size());
  if (auto s = ValidateId(worker_id, kWorkerIdMetadata); !s.ok()) return ToGrpcStatus(s);
  if (!FindWorker(worker_id)) return WorkerNotRegistered(ctx, worker_id);
  SlotGuard slot(&streams_);
  if (!slot.held()) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        Cat("too many concurrent ReportTrials streams (", options_.max_concurrent_streams,
                            "); retry later"));
  }
  std::map<int64_t, std::set<std::string>> run_problems;  // runs checked in this stream -> their job's problems
  std::vector<Trial> batch;
  int64_t received = 0, inserted = 0;
  grpc::Status result = grpc::Status::OK;
  v1::Trial proto;
  while (reader->Read(&proto)) {
    if (received >= kMaxTrialsPerStream) {
      result = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            Cat("more than ", kMaxTrialsPerStream, " trials in one stream; split the upload"));
      break;
    }
    ++received;
    auto trial = TrialFromProto(proto);
    if (!trial.ok()) {
      result = Invalid(Cat("trial #", received, ": ", trial.status().message()));
      break;
    }
    auto run = run_problems.find(trial->run_id);
    if (run == run_problems.end()) {
      Job job;
      if (auto s = CheckRunHeldBy(trial->run_id, worker_id, &job); !s.ok()) {
        result = s;
        break;
      }
      run = run_problems.emplace(trial->run_id, std::set<std::string>(job.problem_keys.begin(), job.problem_keys.end()))
                .first;
    }
    if (run->second.count(trial->problem_key) == 0) {
      result = Invalid(Cat("trial #", received, ": problem '", trial->problem_key, "' is not part of run ",
                           trial->run_id, "'s job"));
      break;
    }
    batch.push_back(std::move(*trial));
    if (batch.size() >= kTrialFlushBatch) {
      if (auto s = FlushTrials(&batch, &inserted); !s.ok()) {
        result = s;
        break;
      }
    }
  }
  if (result.ok()) result = FlushTrials(&batch, &inserted);
  metrics_->AddTrials(received, inserted);
  resp->set_received(static_cast<int32_t>(received));
  resp->set_inserted(static_cast<int32_t>(inserted));
  return result;
}

absl::Status Server::Impl::ComputeBestConfigs(const Job& job) {
  auto run = store_->GetRun(job.run_id);
  if (!run.ok()) return run.status();
  for (const std::string& key : job.problem_keys) {
    auto trials = store_->ListTrials(job.run_id, key);
    if (!trials.ok()) return trials.status();
    if (trials->empty()) continue;
    auto best = SelectBest(*trials, job.device_class, job.run_id, run->commit);
    if (absl::IsNotFound(best.status())) continue;  // nothing verified: nothing to serve
    if (!best.ok()) return best.status();
    best->updated_unix_ms = NowUnixMs();
    if (auto s = store_->UpsertBestConfig(*best); !s.ok()) return s;
  }
  return absl::OkStatus();
}

grpc::Status Server::Impl::CompleteJob(const v1::CompleteJobRequest& req) {
  if (auto s = ValidateId(req.worker_id(), "worker_id"); !s.ok()) return ToGrpcStatus(s);
  if (req.job_id() <= 0) return Invalid("job_id: must be > 0");
  if (auto s = CheckText(req.error(), kMaxTextLength, "error"); !s.ok()) return s;
  auto job = store_->GetJob(req.job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  const int64_t now = NowUnixMs();
  if (job->state == JobState::kLeased && job->leased_by == req.worker_id()) {
    // Best configs first: if this server dies in between, the job is still leased and the
    // worker's retry recomputes them; never a "done" job without its best configs.
    // An audit measures the recorded best configs; it does not replace them.
    if (req.success() && job->run_id > 0 && JobKindOf(*job) == v1::JOB_KIND_TUNE) {
      if (auto s = ComputeBestConfigs(*job); !s.ok()) return ToGrpcStatus(s);
    }
    if (job->run_id > 0) (void)store_->FinishRun(job->run_id);
  }
  // The store decides exactly-once: OK the first time, OK for the same worker's retry,
  // FailedPrecondition otherwise.
  if (auto s = store_->CompleteJob(req.job_id(), req.worker_id(), req.success(), req.error(), now); !s.ok()) {
    return ToGrpcStatus(s);
  }
  RefreshIndex();
  RefreshGauges();
  return grpc::Status::OK;
}

grpc::Status Server::Impl::ReportAudit(grpc::ServerContextBase* ctx, const v1::ReportAuditRequest& req,
                                       v1::ReportAuditResponse* resp) {
  if (auto s = ValidateId(req.worker_id(), "worker_id"); !s.ok()) return ToGrpcStatus(s);
  if (req.job_id() <= 0) return Invalid("job_id: must be > 0");
  if (!req.has_audit()) return Invalid("audit: required");
  auto audit = AuditSummaryFromProto(req.audit());
  if (!audit.ok()) return ToGrpcStatus(audit.status());
  if (!FindWorker(req.worker_id())) return WorkerNotRegistered(ctx, req.worker_id());
  auto job = store_->GetJob(req.job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  if (JobKindOf(*job) != v1::JOB_KIND_AUDIT) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, Cat("job ", job->job_id, " is not an audit job"));
  }
  if (job->state != JobState::kLeased || job->leased_by != req.worker_id()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        Cat("job ", job->job_id, " is not leased by worker '", req.worker_id(), "'"));
  }
  // The job decides where the audit belongs; a summary naming anything else is a client bug.
  if (audit->run_id != 0 && audit->run_id != job->run_id) {
    return Invalid(Cat("audit.run_id: ", audit->run_id, " is not job ", job->job_id, "'s run ", job->run_id));
  }
  if (!audit->device_class.empty() && audit->device_class != job->device_class) {
    return Invalid(Cat("audit.device_class: '", audit->device_class, "' is not the job's '", job->device_class, "'"));
  }
  if (!audit->commit.empty() && audit->commit != job->commit) {
    return Invalid(Cat("audit.commit: '", audit->commit, "' is not the job's '", job->commit, "'"));
  }
  if (std::find(job->problem_keys.begin(), job->problem_keys.end(), audit->problem_key) == job->problem_keys.end()) {
    return Invalid(Cat("audit.problem_key: '", audit->problem_key, "' is not a problem of job ", job->job_id));
  }
  audit->run_id = job->run_id;
  audit->device_class = job->device_class;
  audit->commit = job->commit;
  if (audit->created_unix_ms == 0) audit->created_unix_ms = NowUnixMs();
  // A retried report (its reply lost) must not store a second audit of the same measurement.
  auto existing = store_->ListAudits(audit->device_class, audit->problem_key, 100000);
  if (!existing.ok()) return ToGrpcStatus(existing.status());
  for (const AuditSummary& a : *existing) {
    if (a.run_id == audit->run_id) {
      resp->set_audit_id(a.audit_id);
      return grpc::Status::OK;
    }
  }
  auto id = store_->RecordAudit(*audit);
  if (!id.ok()) return ToGrpcStatus(id.status());
  resp->set_audit_id(*id);
  return grpc::Status::OK;
}

grpc::Status Server::Impl::ReleaseJob(const v1::ReleaseJobRequest& req) {
  if (auto s = ValidateId(req.worker_id(), "worker_id"); !s.ok()) return ToGrpcStatus(s);
  if (req.job_id() <= 0) return Invalid("job_id: must be > 0");
  if (auto s = store_->ReleaseJob(req.job_id(), req.worker_id()); !s.ok()) return ToGrpcStatus(s);
  NotifyQueue();
  RefreshGauges();
  return grpc::Status::OK;
}

// ------------------------------------------------------------------------------ Server

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  if (options.lease_ms <= 0 || options.heartbeat_ms <= 0 || options.refresh_ms <= 0 ||
      options.worker_alive_ms <= 0) {
    return absl::InvalidArgumentError("lease_ms, heartbeat_ms, refresh_ms and worker_alive_ms must be > 0");
  }
  if (options.max_concurrent_long_polls < 1 || options.max_concurrent_streams < 1 ||
      options.max_receive_message_bytes < 1024 || options.max_threads < 4) {
    return absl::InvalidArgumentError("concurrency caps must be >= 1, max_threads >= 4, messages >= 1 KiB");
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key file");
  }
  if (options.db_path.empty()) return absl::InvalidArgumentError("db_path is required");
  if (auto s = ValidateServiceAddress(options.listen_address, "listen address", /*listening=*/true); !s.ok()) {
    return s;
  }
  std::string token = options.token;
  if (token.empty() && !options.token_file.empty()) {
    auto t = ReadFirstLine(options.token_file, "token");
    if (!t.ok()) return t.status();
    token = *t;
  }
  if (token.empty()) {
    if (const char* env = std::getenv("FUSETUNE_TOKEN"); env != nullptr) {
      token = std::string(absl::StripAsciiWhitespace(env));
    }
  }
  if (token.empty()) {
    return absl::InvalidArgumentError(
        "a token is required for workers and writes: give --token-file or set FUSETUNE_TOKEN");
  }
  auto store = Store::Open(options.db_path);
  if (!store.ok()) return store.status();
  auto metrics = ServiceMetrics::Create(options.metrics_address, RpcMethodNames());
  if (!metrics.ok()) return metrics.status();
  auto impl = std::make_unique<Impl>(options, std::move(token), std::move(*store), std::move(*metrics));
  if (auto s = impl->Init(); !s.ok()) return s;
  if (auto s = impl->StartGrpc(); !s.ok()) return s;
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { Shutdown(); }
void Server::Shutdown() { impl_->Shutdown(); }
void Server::Wait() { impl_->Wait(); }
int Server::port() const { return impl_->port(); }
int Server::metrics_port() const { return impl_->metrics_port(); }
Store* Server::store() { return impl_->store(); }

}  // namespace fusetune
