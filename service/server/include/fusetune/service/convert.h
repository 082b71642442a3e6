// Conversions between the wire types of fusetune.proto (fusetune::v1) and fusetune's own
// types, with the bounds every service component enforces on what a peer may send.
//
// Every *FromProto function validates: on bad input it returns InvalidArgument with a
// message naming the offending field, and never crashes or allocates unboundedly (list
// sizes are checked before anything is copied). The *ToProto functions cannot fail.
// Used by the server, the worker and the client alike, so all three agree on the bounds.
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_SERVICE_CONVERT_H_
#define FUSETUNE_SERVICE_CONVERT_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"
#include "fusetune/proto/fusetune.pb.h"
#include "fusetune/records/trial.h"
#include "fusetune/records/run.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace fusetune {

// ---- bounds (INVALID_ARGUMENT beyond them)
inline constexpr size_t kMaxDeviceClassLength = 200;   // "backend/name/arch"
inline constexpr size_t kMaxIdLength = 128;            // worker ids, trial ids
inline constexpr size_t kMaxKeyLength = 256;           // problem and config keys, commits
inline constexpr size_t kMaxTextLength = 4096;         // free text: trial messages, errors, JSON
inline constexpr int kMaxSamplesPerTrial = 1000;       // timing samples in one trial
inline constexpr int kMaxAttempt = 1000;               // trial attempt number
inline constexpr int kMaxBlocksPerTrial = 1000;        // timing blocks in one trial
inline constexpr int kMaxSamplesPerBlock = 1000000;    // timed launches in one block
// A tuning job must be runnable: a worker allocates Q, K, V and O. Lookups (GetBestConfig)
// accept anything AttentionProblem::Validate accepts (up to 2^34 elements per tensor); a
// submitted job's tensors are capped at 2^31 elements each (8 GiB in fp32).
inline constexpr int64_t kMaxJobTensorElements = int64_t{1} << 31;

// OK when `device_class` looks like "backend/name/arch": three non-empty parts separated by
// '/', backend one of cpu, cuda, hip, printable ASCII without whitespace, quotes or
// backslashes (CPU model names bring '(R)' and '@'), at most kMaxDeviceClassLength characters.
absl::Status ValidateDeviceClass(std::string_view device_class);

// OK when `id` is 1..kMaxIdLength characters of [A-Za-z0-9._:@+-] (worker ids, trial ids).
absl::Status ValidateId(std::string_view id, std::string_view field);

// Problem: kind "" = prefill, kv_heads 0 = q_heads, dtype "" = fp32; then
// AttentionProblem::Validate(). Length lists longer than kMaxBatch + 1 are refused before
// they are copied.
absl::StatusOr<AttentionProblem> ProblemFromProto(const v1::Problem& proto);
void ProblemToProto(const AttentionProblem& problem, v1::Problem* proto);
// ProblemFromProto plus the job bound (kMaxJobTensorElements per tensor).
absl::StatusOr<AttentionProblem> JobProblemFromProto(const v1::Problem& proto);

// Config: from the fields when `variant` is set (and then `key`, if set, must agree), else
// from `key` (KernelConfig::FromKey); KernelConfig::Validate() either way.
absl::StatusOr<KernelConfig> ConfigFromProto(const v1::Config& proto);
void ConfigToProto(const KernelConfig& config, v1::Config* proto);  // sets key too

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
// configs_measured >= 1, configs_failed >= 0, strings within bounds. device_class (valid
// when set), run_id and commit may be empty/0: the server fills them from the audit's job.
absl::StatusOr<AuditSummary> AuditSummaryFromProto(const v1::AuditSummary& proto);
void AuditSummaryToProto(const AuditSummary& audit, v1::AuditSummary* proto);

// Job kind names: "tune" and "audit" (the CLI's `submit --kind`, `jobs` output).
std::string_view JobKindName(v1::JobKind kind);  // "?" for a value outside the enum
absl::StatusOr<v1::JobKind> ParseJobKind(std::string_view name);  // InvalidArgument otherwise

// DeviceInfo: backend cpu/cuda/hip, strings within kMaxKeyLength, counts >= 0. The
// proto's device_class, when set, must be a valid class; it is not stored in DeviceInfo
// (DeviceInfo::DeviceClass() derives it), so callers that need it read the proto field.
absl::StatusOr<DeviceInfo> DeviceInfoFromProto(const v1::DeviceInfo& proto);
void DeviceInfoToProto(const DeviceInfo& info, v1::DeviceInfo* proto);  // sets device_class

// absl and gRPC share the canonical status codes; these map one to the other.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// ---- error reasons (fusetune.proto, "Error reasons")
// Some errors carry a machine-readable reason in the trailing metadata entry
// kErrorReasonMetadata, so that a client branches on it instead of on message text.
inline constexpr char kErrorReasonMetadata[] = "fusetune-error-reason";
// FAILED_PRECONDITION: the worker named by the call is not registered with this server (a
// fresh database, or a server that never saw it): RegisterWorker, then retry the call.
inline constexpr char kReasonWorkerNotRegistered[] = "WORKER_NOT_REGISTERED";

// FromGrpcStatus of a finished call, keeping the reason the server sent (if any) as the
// payload kErrorReasonMetadata of the returned status.
absl::Status FromGrpcCall(const grpc::Status& status, const grpc::ClientContext& finished_call);
// The reason carried by a status made by FromGrpcCall ("" when none).
std::string ErrorReason(const absl::Status& status);

}  // namespace fusetune

#endif  // FUSETUNE_SERVICE_CONVERT_H_
