// The records half of the wire library: conversions between fusetune.proto's
// (fusetune::v1) tuning messages and the records (fusetune/records/): trials with their sample
// blocks and device states, audits, jobs and their leases, regressions, workers and
// best-config answers, with the validation of the requests that carry them, and the
// client call that uploads regression verdicts. Built on
// fusetune/wire/convert.h (the client-facing half) and the bounds it defines.
//
// Every *FromProto / *From*Request function validates: on bad input it returns
// InvalidArgument with a message naming the offending field, and never crashes or
// allocates unboundedly. The *ToProto functions cannot fail. Used by the server and the
// worker alike, so both agree on the bounds.
//
// Thread-safety: pure functions and plain structs.
#ifndef FUSETUNE_WIRE_RECORDS_CONVERT_H_
#define FUSETUNE_WIRE_RECORDS_CONVERT_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/config.h"
#include "fusetune/proto/fusetune.grpc.pb.h"
#include "fusetune/proto/fusetune.pb.h"
#include "fusetune/records/change_point.h"
#include "fusetune/records/commit.h"
#include "fusetune/records/job.h"
#include "fusetune/records/regression.h"
#include "fusetune/records/run.h"
#include "fusetune/records/trial.h"
#include "fusetune/records/worker.h"
#include "fusetune/wire/convert.h"
#include "fusetune/wire/provenance.h"

namespace fusetune {

// ---- commits (fusetune/records/commit.h)
// A commit a peer sends to be stored, in canonical form: at most kMaxKeyLength characters, a
// hash or a label ("" stays "": callers that need one say so). InvalidArgument
// "<field>: ..." otherwise, for an abbreviation too: a peer resolves its abbreviations before
// it sends a commit to be stored.
absl::StatusOr<std::string> CommitFromProto(std::string_view commit, std::string_view field);
// The commit filter of a List* request: "" (every commit), a hash or label in canonical form,
// or an abbreviation lowercased (the server resolves it against its stored commits). At most
// kMaxKeyLength characters; InvalidArgument "<field>: ..." otherwise.
absl::StatusOr<std::string> CommitFilterFromProto(std::string_view commit, std::string_view field);

// ---- trials and audits
// Trial stage: the three known stages; any other enum value is InvalidArgument.
absl::StatusOr<TrialStage> TrialStageFromProto(v1::TrialStage stage);
v1::TrialStage TrialStageToProto(TrialStage stage);

// DeviceState: clock and power >= 0. `field` names it in the error message.
absl::StatusOr<DeviceState> DeviceStateFromProto(const v1::DeviceState& proto, std::string_view field);
void DeviceStateToProto(const DeviceState& state, v1::DeviceState* proto);

// SampleBlock: samples in [0, kMaxSamplesPerBlock], median finite and >= 0, both device
// states valid. `unsteady` is carried as sent (the worker computed it from the states).
absl::StatusOr<SampleBlock> SampleBlockFromProto(const v1::SampleBlock& proto, std::string_view field);
void SampleBlockToProto(const SampleBlock& block, v1::SampleBlock* proto);

// Trial: trial_id, when set, must equal TrialId(run_id, problem_key, config_key, attempt,
// stage) (so that a retried upload is recognisably the same trial; the stage is part of the
// id for non-screen trials); when empty the result carries that id (the formula is spelled
// out in fusetune.proto, message Trial). run_id > 0, the config key parses, the outcome and
// stage are known, at most kMaxSamplesPerTrial samples and kMaxBlocksPerTrial blocks, times
// (samples, medians, wall_seconds) finite and >= 0, errors >= 0 (+inf allowed for a failed
// verification, NaN never), strings within bounds. A trial sent without the stage, blocks
// and wall_seconds fields reads as a screen trial with no blocks and wall_seconds 0.
absl::StatusOr<Trial> TrialFromProto(const v1::Trial& proto);
void TrialToProto(const Trial& trial, v1::Trial* proto);

// AuditSummary: problem key set, both config keys parse, times finite and >= 0, regret and
// its interval finite, > -1 and regret_low <= regret <= regret_high, rounds >= 1,
// configs_measured >= 1, configs_failed >= 0, strings within bounds, the commit as
// CommitFromProto. device_class (valid when set), run_id and commit may be empty/0: the
// server fills them from the audit's job.
absl::StatusOr<AuditSummary> AuditSummaryFromProto(const v1::AuditSummary& proto);
void AuditSummaryToProto(const AuditSummary& audit, v1::AuditSummary* proto);


// ---- jobs
// A job's spec: the SubmitTuningJobRequest it was queued from, stored as JSON in
// Job::spec_json. Internal when the stored JSON does not parse.
absl::StatusOr<v1::SubmitTuningJobRequest> JobSpec(const Job& job);

// Tune or audit, as submitted (the kind lives in the spec: a spec without one is a tune
// job). An unreadable spec reads as tune here; such a
// job fails at its lease.
v1::JobKind JobKindOf(const Job& job);

void JobToProto(const Job& job, v1::Job* proto);

// The queued job a SubmitTuningJobRequest asks for: 1..kMaxJobProblems problems (each
// JobProblemFromProto, no two with the same key), a valid device class, a commit as
// CommitFromProto (stored in canonical form),
// max_trials in [0, 1000000], max_seconds finite in [0, 7 days], at most 3 known variants
// and 4 known precisions, kind tune or audit. The job's spec_json is the request itself as
// JSON (Internal if it cannot be encoded); created_unix_ms is left 0 for the caller.
inline constexpr int kMaxJobProblems = 256;
absl::StatusOr<Job> JobFromSubmitRequest(const v1::SubmitTuningJobRequest& request);

// ListJobsRequest.state: "" (every state, nullopt) or a JobStateName.
absl::StatusOr<std::optional<JobState>> JobStateFilterFromProto(std::string_view state);

// What a worker receives with a freshly leased job: the job, its spec, and (for an audit)
// the config key recorded as best for each of its problems ("" where none is recorded).
struct JobLease {
  Job job;
  v1::SubmitTuningJobRequest spec;
  std::vector<std::string> recorded_config_keys;
};
void JobLeaseToProto(const JobLease& lease, v1::LeaseJobResponse* proto);  // sets leased

// ---- regressions
void RegressionToProto(const Regression& regression, v1::Regression* proto);
void ChangePointToProto(const ChangePointRow& change_point, v1::ChangePoint* proto);
// The store filter of a ListChangePointsRequest: InvalidArgument for a malformed device class
// or commit (CommitFilterFromProto; the limit is checked by the caller).
absl::StatusOr<ChangePointFilter> ChangePointFilterFromProto(const v1::ListChangePointsRequest& request);

// One verdict as sent (`field` names it in messages, e.g. "regressions[3]"): the store's
// rules (ValidateRegression: non-empty commits, device class, keys and metric, a verdict of
// kRegressionVerdicts, a finite ratio >= 0, a p-value in [0, 1], a time >= 0), a valid
// device class, commits as CommitFromProto (stored in canonical form), keys and metric
// within kMaxKeyLength.
// InvalidArgument "<field>.<name>: ..." or "<field>: ..." otherwise.
absl::StatusOr<Regression> RegressionFromProto(const v1::Regression& proto, std::string_view field);

// The verdicts of a ReportRegressionsRequest: at most kMaxReportedRegressions rows, each
// RegressionFromProto (the first bad row's error, naming its index "regressions[i]").
inline constexpr int kMaxReportedRegressions = 10000;
absl::StatusOr<std::vector<Regression>> RegressionsFromReportRequest(const v1::ReportRegressionsRequest& request);

// The client side of ReportRegressions: checks `rows` as the server will (nothing is sent
// when one is bad: InvalidArgument naming it), sends them in one call on `context` (which
// carries the token and deadline) and returns how many the server recorded. An RPC failure
// comes back as its absl status (FromGrpcCall: UNAUTHENTICATED, UNAVAILABLE, ...); the
// server stores all rows or none.
absl::StatusOr<int> UploadRegressions(v1::TuningService::StubInterface& tuning, grpc::ClientContext* context,
                                      const std::vector<Regression>& rows);

// ---- workers
// The worker a RegisterWorkerRequest describes: a valid worker_id, host within
// kMaxKeyLength, a device (DeviceInfoFromProto) whose class (the request's device_class, or
// DeviceInfo::DeviceClass() when empty) is valid. The device is stored as JSON with its
// class; the timestamps are left 0 for the caller.
absl::StatusOr<WorkerRecord> WorkerFromRegisterRequest(const v1::RegisterWorkerRequest& request);

// The device a worker registered with (WorkerRecord::device_json); InvalidArgument when the
// stored JSON does not parse or does not describe a valid device.
absl::StatusOr<DeviceInfo> WorkerDevice(const WorkerRecord& worker);

// One row of ListWorkers: `alive` as the server judged it, `leased_jobs` the jobs the
// worker holds (in the order given; the earliest lease expiry is reported).
void WorkerStatusToProto(const WorkerRecord& worker, bool alive, std::span<const Job* const> leased_jobs,
                         v1::WorkerStatus* proto);

// ---- best-config answers
// A GetBestConfig answer (BestConfigIndex::Lookup).
struct BestConfigAnswer {
  ConfigProvenance provenance = ConfigProvenance::kDefault;  // never kFallback
  KernelConfig config;
  std::string problem_key;         // the requested problem's key
  double distance = 0;             // 0 for exact and default; the shape distance for nearest
  // The stored best config the answer came from (source.problem_key empty for DEFAULT).
  BestConfig source;
};
void BestConfigAnswerToProto(const BestConfigAnswer& answer, v1::GetBestConfigResponse* proto);
// The answer a client received: what BestConfigAnswerToProto sent (the source's fields that the
// response does not carry stay at their defaults). InvalidArgument naming "config" when the
// answer's config is not one.
absl::StatusOr<BestConfigAnswer> BestConfigAnswerFromProto(const v1::GetBestConfigResponse& proto);

}  // namespace fusetune

#endif  // FUSETUNE_WIRE_RECORDS_CONVERT_H_
