#include "tuning_service.h"

#include <string>

#include "fusetune/base/strings.h"
#include "fusetune/base/time.h"
#include "fusetune/proto/fusetune.grpc.pb.h"
#include "fusetune/wire/convert.h"
#include "fusetune/wire/records_convert.h"

namespace fusetune {
namespace {

constexpr int kMaxBatchLookups = 1024;
constexpr size_t kMaxListTrialsBytes = 3u << 20;  // keeps replies under a client's 4 MiB default

class TuningServiceImpl final : public v1::TuningService::Service {
 public:
  TuningServiceImpl(ServerCore* core, const RpcEdge* edge) : core_(core), edge_(edge) {}

  grpc::Status GetBestConfig(grpc::ServerContext* ctx, const v1::GetBestConfigRequest* req,
                             v1::GetBestConfigResponse* resp) override {
    return Read("GetBestConfig", ctx, [&] { return AnswerGetBestConfig(*req, resp); });
  }
  grpc::Status BatchGetBestConfig(grpc::ServerContext* ctx, const v1::BatchGetBestConfigRequest* req,
                                  v1::BatchGetBestConfigResponse* resp) override {
    return Read("BatchGetBestConfig", ctx, [&] { return AnswerBatchGetBestConfig(*req, resp); });
  }
  grpc::Status SubmitTuningJob(grpc::ServerContext* ctx, const v1::SubmitTuningJobRequest* req,
                               v1::SubmitTuningJobResponse* resp) override {
    return edge_->Handle("SubmitTuningJob", ctx, [&]() -> absl::Status {
      if (auto s = edge_->Authenticate(ctx); !s.ok()) return s;
      auto job = JobFromSubmitRequest(*req);
      if (!job.ok()) return job.status();
      auto id = core_->SubmitJob(std::move(*job));
      if (!id.ok()) return id.status();
      resp->set_job_id(*id);
      return absl::OkStatus();
    });
  }
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req, v1::Job* resp) override {
    return Read("GetJob", ctx, [&] { return AnswerGetJob(*req, resp); });
  }
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override {
    return Read("ListJobs", ctx, [&] { return AnswerListJobs(*req, resp); });
  }
  grpc::Status ListTrials(grpc::ServerContext* ctx, const v1::ListTrialsRequest* req,
                          v1::ListTrialsResponse* resp) override {
    return Read("ListTrials", ctx, [&] { return AnswerListTrials(*req, resp); });
  }
  grpc::Status ListChangePoints(grpc::ServerContext* ctx, const v1::ListChangePointsRequest* req,
                                v1::ListChangePointsResponse* resp) override {
    return Read("ListChangePoints", ctx, [&] { return AnswerListChangePoints(*req, resp); });
  }

  grpc::Status ListRegressions(grpc::ServerContext* ctx, const v1::ListRegressionsRequest* req,
                               v1::ListRegressionsResponse* resp) override {
    return Read("ListRegressions", ctx, [&] { return AnswerListRegressions(*req, resp); });
  }
  grpc::Status ReportRegressions(grpc::ServerContext* ctx, const v1::ReportRegressionsRequest* req,
                                 v1::ReportRegressionsResponse* resp) override {
    return edge_->Handle("ReportRegressions", ctx, [&]() -> absl::Status {
      if (auto s = edge_->Authenticate(ctx); !s.ok()) return s;
      auto rows = RegressionsFromReportRequest(*req);
      if (!rows.ok()) return rows.status();
      auto recorded = core_->ReportRegressions(*rows);
      if (!recorded.ok()) return recorded.status();
      resp->set_recorded(*recorded);
      return absl::OkStatus();
    });
  }
  grpc::Status ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest* req,
                           v1::ListWorkersResponse* resp) override {
    return Read("ListWorkers", ctx, [&] { return AnswerListWorkers(*req, resp); });
  }
  grpc::Status ListAudits(grpc::ServerContext* ctx, const v1::ListAuditsRequest* req,
                          v1::ListAuditsResponse* resp) override {
    return Read("ListAudits", ctx, [&] { return AnswerListAudits(*req, resp); });
  }

 private:
  // A read RPC: authenticated unless reads are open.
  template <typename F>
  grpc::Status Read(const char* method, grpc::ServerContext* ctx, F&& body) {
    return edge_->Handle(method, ctx, [&]() -> absl::Status {
      if (auto s = edge_->AuthenticateRead(ctx); !s.ok()) return s;
      return body();
    });
  }

  // Each RPC's body after authentication: validate, call the core, map the answer.
  absl::Status AnswerGetBestConfig(const v1::GetBestConfigRequest& req, v1::GetBestConfigResponse* resp);
  absl::Status AnswerBatchGetBestConfig(const v1::BatchGetBestConfigRequest& req, v1::BatchGetBestConfigResponse* resp);
  absl::Status AnswerGetJob(const v1::GetJobRequest& req, v1::Job* resp);
  absl::Status AnswerListJobs(const v1::ListJobsRequest& req, v1::ListJobsResponse* resp);
  absl::Status AnswerListTrials(const v1::ListTrialsRequest& req, v1::ListTrialsResponse* resp);
  absl::Status AnswerListRegressions(const v1::ListRegressionsRequest& req, v1::ListRegressionsResponse* resp);
  absl::Status AnswerListChangePoints(const v1::ListChangePointsRequest& req, v1::ListChangePointsResponse* resp);
  absl::Status AnswerListWorkers(const v1::ListWorkersRequest& req, v1::ListWorkersResponse* resp);
  absl::Status AnswerListAudits(const v1::ListAuditsRequest& req, v1::ListAuditsResponse* resp);

  ServerCore* const core_;
  const RpcEdge* const edge_;
};

absl::Status TuningServiceImpl::AnswerGetBestConfig(const v1::GetBestConfigRequest& req,
                                                     v1::GetBestConfigResponse* resp) {
  if (auto s = ValidateDeviceClass(req.device_class()); !s.ok()) return s;
  auto problem = ProblemFromProto(req.problem());
  if (!problem.ok()) return problem.status();
  auto answer = core_->GetBestConfig(*problem, req.device_class());
  if (!answer.ok()) return answer.status();
  BestConfigAnswerToProto(*answer, resp);
  return absl::OkStatus();
}

absl::Status TuningServiceImpl::AnswerBatchGetBestConfig(const v1::BatchGetBestConfigRequest& req,
                                            v1::BatchGetBestConfigResponse* resp) {
  if (req.requests_size() > kMaxBatchLookups) {
    return absl::InvalidArgumentError(
        Cat("requests: at most ", kMaxBatchLookups, " per call, got ", req.requests_size()));
  }
  for (const auto& r : req.requests()) {
    auto* entry = resp->add_entries();
    if (absl::Status s = AnswerGetBestConfig(r, entry->mutable_response()); !s.ok()) {
      entry->clear_response();
      entry->set_error(std::string(s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status TuningServiceImpl::AnswerGetJob(const v1::GetJobRequest& req, v1::Job* resp) {
  if (req.job_id() <= 0) return absl::InvalidArgumentError("job_id: must be > 0");
  auto job = core_->GetJob(req.job_id());
  if (!job.ok()) return job.status();
  JobToProto(*job, resp);
  if (job->run_id > 0) {
    // Counted in SQL: GetJob is polled by `submit --wait`, and a run can hold many trials.
    auto count = core_->CountTrials(job->run_id);
    if (!count.ok()) return count.status();
    resp->set_trials_recorded(*count);
  }
  return absl::OkStatus();
}

absl::Status TuningServiceImpl::AnswerListJobs(const v1::ListJobsRequest& req, v1::ListJobsResponse* resp) {
  auto state = JobStateFilterFromProto(req.state());
  if (!state.ok()) return state.status();
  auto limit = ListLimitFromProto(req.limit(), 100, 1000);
  if (!limit.ok()) return limit.status();
  auto jobs = core_->ListJobs(*state, *limit);
  if (!jobs.ok()) return jobs.status();
  for (const Job& j : *jobs) JobToProto(j, resp->add_jobs());
  return absl::OkStatus();
}

absl::Status TuningServiceImpl::AnswerListTrials(const v1::ListTrialsRequest& req, v1::ListTrialsResponse* resp) {
  if (req.run_id() < 0) return absl::InvalidArgumentError("run_id: must be >= 0");
  auto limit = ListLimitFromProto(req.limit(), 1000, 10000);
  if (!limit.ok()) return limit.status();
  if (auto s = ValidateText(req.problem_key(), kMaxKeyLength, "problem_key"); !s.ok()) return s;
  if (req.run_id() == 0) {
    if (req.problem_key().empty() || req.device_class().empty()) {
      return absl::InvalidArgumentError("give run_id, or problem_key with device_class");
    }
    if (auto s = ValidateDeviceClass(req.device_class()); !s.ok()) return s;
  }
  // One more than the limit, to tell a full page from a truncated one.
  auto trials = core_->ListTrials(req.run_id(), req.problem_key(), req.device_class(), *limit + 1);
  if (!trials.ok()) return trials.status();
  size_t bytes = 0;
  for (const Trial& t : *trials) {
    if (resp->trials_size() >= *limit) {
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
  return absl::OkStatus();
}

absl::Status TuningServiceImpl::AnswerListRegressions(const v1::ListRegressionsRequest& req,
                                                v1::ListRegressionsResponse* resp) {
  absl::StatusOr<std::string> commit = CommitFilterFromProto(req.commit(), "commit");
  if (!commit.ok()) return commit.status();
  auto limit = ListLimitFromProto(req.limit(), 100, 1000);
  if (!limit.ok()) return limit.status();
  auto regressions = core_->ListRegressions(*commit, *limit);
  if (!regressions.ok()) return regressions.status();
  for (const Regression& r : *regressions) RegressionToProto(r, resp->add_regressions());
  return absl::OkStatus();
}

absl::Status TuningServiceImpl::AnswerListChangePoints(const v1::ListChangePointsRequest& req,
                                                       v1::ListChangePointsResponse* resp) {
  absl::StatusOr<ChangePointFilter> filter = ChangePointFilterFromProto(req);
  if (!filter.ok()) return filter.status();
  auto limit = ListLimitFromProto(req.limit(), 1000, 10000);
  if (!limit.ok()) return limit.status();
  auto rows = core_->ListChangePoints(*filter, *limit);
  if (!rows.ok()) return rows.status();
  for (const ChangePointRow& c : *rows) ChangePointToProto(c, resp->add_change_points());
  return absl::OkStatus();
}

absl::Status TuningServiceImpl::AnswerListWorkers(const v1::ListWorkersRequest& req, v1::ListWorkersResponse* resp) {
  auto limit = ListLimitFromProto(req.limit(), 1000, 10000);
  if (!limit.ok()) return limit.status();
  const int64_t now = NowUnixMs();
  auto workers = core_->ListWorkers(now);
  if (!workers.ok()) return workers.status();
  for (const WorkerView& w : *workers) {
    if (resp->workers_size() >= *limit) {
      resp->set_truncated(true);
      break;
    }
    std::vector<const Job*> leased;
    for (const Job& j : w.leased_jobs) leased.push_back(&j);
    WorkerStatusToProto(w.record, w.alive, leased, resp->add_workers());
  }
  resp->set_now_unix_ms(now);
  resp->set_alive_window_ms(core_->options().worker_alive_ms);
  return absl::OkStatus();
}

absl::Status TuningServiceImpl::AnswerListAudits(const v1::ListAuditsRequest& req, v1::ListAuditsResponse* resp) {
  if (!req.device_class().empty()) {
    if (auto s = ValidateDeviceClass(req.device_class()); !s.ok()) return s;
  }
  if (auto s = ValidateText(req.problem_key(), kMaxKeyLength, "problem_key"); !s.ok()) return s;
  auto limit = ListLimitFromProto(req.limit(), 100, 1000);
  if (!limit.ok()) return limit.status();
  auto audits = core_->ListAudits(req.device_class(), req.problem_key(), *limit);
  if (!audits.ok()) return audits.status();
  for (const AuditSummary& a : *audits) AuditSummaryToProto(a, resp->add_audits());
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<grpc::Service> NewTuningService(ServerCore* core, const RpcEdge* edge) {
  return std::make_unique<TuningServiceImpl>(core, edge);
}

}  // namespace fusetune
