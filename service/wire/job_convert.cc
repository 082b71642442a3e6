// Jobs, leases, regressions, workers and best-config answers (fusetune/wire/records_convert.h).
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <utility>

#include "fusetune/base/strings.h"
#include "fusetune/wire/records_convert.h"
#include "fusetune/wire/status.h"
#include "google/protobuf/util/json_util.h"
#include "field_error.h"

namespace fusetune {
namespace {

using wire_internal::InvalidField;

// Stored JSON keeps the proto's field names, so that it reads like fusetune.proto.
absl::StatusOr<std::string> ToStoredJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  std::string json;
  if (auto s = google::protobuf::util::MessageToJsonString(message, &json, print); !s.ok()) {
    return absl::InternalError(s.ToString());
  }
  return json;
}

// The budget, variant, precision and kind fields of a submission.
absl::Status CheckJobOptions(const v1::SubmitTuningJobRequest& req) {
  if (req.max_trials() < 0 || req.max_trials() > 1000000) {
    return InvalidField("max_trials", "must be in [0, 1000000] (0 = exhaustive)");
  }
  if (!std::isfinite(req.max_seconds()) || req.max_seconds() < 0 || req.max_seconds() > 7 * 86400) {
    return InvalidField("max_seconds", "must be finite, in [0, 604800] (0 = unbounded)");
  }
  if (req.variants_size() > 3) return InvalidField("variants", "at most 3");
  for (const auto& v : req.variants()) {
    if (!ParseVariant(v).ok()) return InvalidField("variants", Cat("unknown variant '", v.substr(0, 64), "'"));
  }
  if (req.kind() != v1::JOB_KIND_TUNE && req.kind() != v1::JOB_KIND_AUDIT) {
    return InvalidField("kind", Cat("unknown job kind ", static_cast<int>(req.kind())));
  }
  if (req.precisions_size() > 4) return InvalidField("precisions", "at most 4");
  for (const auto& p : req.precisions()) {
    if (!ParsePrecision(p).ok()) {
      return InvalidField("precisions", Cat("unknown precision '", p.substr(0, 64), "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::SubmitTuningJobRequest> JobSpec(const Job& job) {
  v1::SubmitTuningJobRequest spec;
  if (auto s = google::protobuf::util::JsonStringToMessage(job.spec_json, &spec); !s.ok()) {
    return absl::InternalError(Cat("job ", job.job_id, ": stored spec is unreadable"));
  }
  return spec;
}

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
  out->set_lease_token(job.lease_token);
  out->set_run_id(job.run_id);
  out->set_error(job.error);
  out->set_created_unix_ms(job.created_unix_ms);
  out->set_finished_unix_ms(job.finished_unix_ms);
  out->set_kind(JobKindOf(job));
}

absl::StatusOr<Job> JobFromSubmitRequest(const v1::SubmitTuningJobRequest& req) {
  if (req.problems_size() < 1 || req.problems_size() > kMaxJobProblems) {
    return InvalidField("problems", Cat("1..", kMaxJobProblems, " per job, got ", req.problems_size()));
  }
  if (auto s = ValidateDeviceClass(req.device_class()); !s.ok()) return s;
  absl::StatusOr<std::string> commit = CommitFromProto(req.commit(), "commit");
  if (!commit.ok()) return commit.status();
  if (auto s = CheckJobOptions(req); !s.ok()) return s;
  Job job;
  std::set<std::string> seen;
  for (int i = 0; i < req.problems_size(); ++i) {
    auto problem = JobProblemFromProto(req.problems(i));
    if (!problem.ok()) return InvalidField(Cat("problems[", i, "]"), problem.status().message());
    std::string key = problem->Key();
    if (!seen.insert(key).second) return InvalidField(Cat("problems[", i, "]"), Cat("duplicate of ", key));
    job.problem_keys.push_back(std::move(key));
  }
  // The spec is the request itself (full problems with their length lists).
  auto spec = ToStoredJson(req);
  if (!spec.ok()) return absl::InternalError(Cat("cannot encode job spec: ", spec.status().message()));
  job.spec_json = std::move(*spec);
  job.state = JobState::kQueued;
  job.device_class = req.device_class();
  job.commit = *std::move(commit);
  job.max_trials = req.max_trials();
  job.max_seconds = req.max_seconds();
  return job;
}

absl::StatusOr<std::optional<JobState>> JobStateFilterFromProto(std::string_view state) {
  if (state.empty()) return std::optional<JobState>();
  std::optional<JobState> parsed = ParseJobState(state);
  if (!parsed) {
    return InvalidField("state", Cat("unknown '", state.substr(0, 64), "' (queued, leased, done, failed)"));
  }
  return parsed;
}

void JobLeaseToProto(const JobLease& lease, v1::LeaseJobResponse* resp) {
  resp->set_leased(true);
  JobToProto(lease.job, resp->mutable_job());
  *resp->mutable_problems() = lease.spec.problems();
  resp->set_max_trials(lease.spec.max_trials());
  resp->set_max_seconds(lease.spec.max_seconds());
  *resp->mutable_variants() = lease.spec.variants();
  *resp->mutable_precisions() = lease.spec.precisions();
  for (const std::string& key : lease.recorded_config_keys) resp->add_recorded_config_keys(key);
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

void ChangePointToProto(const ChangePointRow& c, v1::ChangePoint* out) {
  out->set_device_class(c.device_class);
  out->set_suite(c.suite);
  out->set_problem_key(c.problem_key);
  out->set_config_key(c.config_key);
  out->set_commit(c.commit);
  out->set_position(c.position);
  out->set_mean_before_us(c.mean_before_us);
  out->set_mean_after_us(c.mean_after_us);
  out->set_ratio(c.ratio);
  out->set_p_value(c.p_value);
  out->set_direction(c.direction);
  out->set_detected_unix_ms(c.detected_unix_ms);
}

absl::StatusOr<ChangePointFilter> ChangePointFilterFromProto(const v1::ListChangePointsRequest& request) {
  if (!request.device_class().empty()) {
    if (auto s = ValidateDeviceClass(request.device_class()); !s.ok()) return s;
  }
  absl::StatusOr<std::string> commit = CommitFilterFromProto(request.commit(), "commit");
  if (!commit.ok()) return commit.status();
  ChangePointFilter filter;
  filter.device_class = request.device_class();
  filter.suite = request.suite();
  filter.problem_key = request.problem_key();
  filter.config_key = request.config_key();
  filter.commit = *std::move(commit);
  return filter;
}

absl::StatusOr<Regression> RegressionFromProto(const v1::Regression& proto, std::string_view field) {
  absl::StatusOr<std::string> commit = CommitFromProto(proto.commit(), Cat(field, ".commit"));
  if (!commit.ok()) return commit.status();
  absl::StatusOr<std::string> baseline_commit = CommitFromProto(proto.baseline_commit(), Cat(field, ".baseline_commit"));
  if (!baseline_commit.ok()) return baseline_commit.status();
  if (auto s = ValidateDeviceClass(proto.device_class()); !s.ok()) {
    return absl::InvalidArgumentError(Cat(field, ".", s.message()));
  }
  for (auto [value, name] : {std::pair{&proto.problem_key(), "problem_key"},
                             std::pair{&proto.config_key(), "config_key"}, std::pair{&proto.metric(), "metric"}}) {
    if (auto s = ValidateText(*value, kMaxKeyLength, Cat(field, ".", name)); !s.ok()) return s;
  }
  Regression r;
  r.commit = *std::move(commit);
  r.baseline_commit = *std::move(baseline_commit);
  r.device_class = proto.device_class();
  r.problem_key = proto.problem_key();
  r.config_key = proto.config_key();
  r.metric = proto.metric();
  r.ratio = proto.ratio();
  r.p_value = proto.p_value();
  r.verdict = proto.verdict();
  r.created_unix_ms = proto.created_unix_ms();
  if (auto s = ValidateRegression(r); !s.ok()) return absl::InvalidArgumentError(Cat(field, ": ", s.message()));
  return r;
}

absl::StatusOr<std::vector<Regression>> RegressionsFromReportRequest(const v1::ReportRegressionsRequest& req) {
  if (req.regressions_size() > kMaxReportedRegressions) {
    return InvalidField("regressions",
                        Cat("at most ", kMaxReportedRegressions, " per call, got ", req.regressions_size()));
  }
  std::vector<Regression> rows;
  rows.reserve(req.regressions_size());
  for (int i = 0; i < req.regressions_size(); ++i) {
    auto r = RegressionFromProto(req.regressions(i), Cat("regressions[", i, "]"));
    if (!r.ok()) return r.status();
    rows.push_back(std::move(*r));
  }
  return rows;
}

absl::StatusOr<int> UploadRegressions(v1::TuningService::StubInterface& tuning, grpc::ClientContext* context,
                                      const std::vector<Regression>& rows) {
  v1::ReportRegressionsRequest req;
  for (const Regression& r : rows) RegressionToProto(r, req.add_regressions());
  if (auto checked = RegressionsFromReportRequest(req); !checked.ok()) return checked.status();
  v1::ReportRegressionsResponse resp;
  const grpc::Status status = tuning.ReportRegressions(context, req, &resp);
  if (!status.ok()) return FromGrpcCall(status, *context);
  return resp.recorded();
}

absl::StatusOr<WorkerRecord> WorkerFromRegisterRequest(const v1::RegisterWorkerRequest& req) {
  if (auto s = ValidateId(req.worker_id(), "worker_id"); !s.ok()) return s;
  if (auto s = ValidateText(req.host(), kMaxKeyLength, "host"); !s.ok()) return s;
  if (!req.has_device()) return InvalidField("device", "required");
  auto device = DeviceInfoFromProto(req.device());
  if (!device.ok()) return device.status();
  const std::string device_class =
      req.device().device_class().empty() ? device->DeviceClass() : req.device().device_class();
  if (auto s = ValidateDeviceClass(device_class); !s.ok()) return s;
  v1::DeviceInfo stored;
  DeviceInfoToProto(*device, &stored);
  stored.set_device_class(device_class);
  auto device_json = ToStoredJson(stored);
  if (!device_json.ok()) return absl::InternalError("cannot encode device info");
  WorkerRecord w;
  w.worker_id = req.worker_id();
  w.host = req.host();
  w.backend = device->backend;
  w.device_class = device_class;
  w.device_json = std::move(*device_json);
  return w;
}

absl::StatusOr<DeviceInfo> WorkerDevice(const WorkerRecord& worker) {
  v1::DeviceInfo proto;
  if (!google::protobuf::util::JsonStringToMessage(worker.device_json, &proto).ok()) {
    return absl::InvalidArgumentError(Cat("worker '", worker.worker_id, "': stored device is unreadable"));
  }
  return DeviceInfoFromProto(proto);
}

void WorkerStatusToProto(const WorkerRecord& w, bool alive, std::span<const Job* const> leased_jobs,
                         v1::WorkerStatus* out) {
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
  out->set_alive(alive);
  if (leased_jobs.empty()) return;
  int64_t expiry = 0;
  for (const Job* j : leased_jobs) {
    out->add_leased_job_ids(j->job_id);
    if (expiry == 0 || j->lease_expiry_unix_ms < expiry) expiry = j->lease_expiry_unix_ms;
  }
  out->set_lease_expiry_unix_ms(expiry);
}

void BestConfigAnswerToProto(const BestConfigAnswer& a, v1::GetBestConfigResponse* out) {
  ConfigToProto(a.config, out->mutable_config());
  out->set_provenance(ConfigProvenanceToProto(a.provenance));
  out->set_problem_key(a.problem_key);
  out->set_source_problem_key(a.source.problem_key);
  out->set_distance(a.distance);
  out->set_median_us(a.source.median_us);
  out->set_speedup_vs_materialized(a.source.speedup_vs_materialized);
  out->set_run_id(a.source.run_id);
  out->set_commit(a.source.commit);
  out->set_max_rel_error(a.source.max_rel_error);
}

absl::StatusOr<BestConfigAnswer> BestConfigAnswerFromProto(const v1::GetBestConfigResponse& in) {
  BestConfigAnswer a;
  absl::StatusOr<KernelConfig> config = ConfigFromProto(in.config());
  if (!config.ok()) return absl::InvalidArgumentError(Cat("config: ", config.status().message()));
  a.config = *config;
  a.provenance = ConfigProvenanceFromProto(in.provenance());
  a.problem_key = in.problem_key();
  a.distance = in.distance();
  a.source.problem_key = in.source_problem_key();
  a.source.config_key = a.config.Key();
  a.source.median_us = in.median_us();
  a.source.speedup_vs_materialized = in.speedup_vs_materialized();
  a.source.run_id = in.run_id();
  a.source.commit = in.commit();
  a.source.max_rel_error = in.max_rel_error();
  return a;
}

}  // namespace fusetune
