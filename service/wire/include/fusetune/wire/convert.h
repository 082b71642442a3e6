// The client-facing half of the wire library: conversions between fusetune.proto's
// (fusetune::v1) problem, config, device and best-config messages and the kernels' own
// types, with the bounds every service component enforces on what a peer may send. Needs
// neither the tuning records nor the store (fusetune/wire/records_convert.h maps those), so
// inference code linking the client does not pull them in.
//
// Every *FromProto function validates: on bad input it returns InvalidArgument with a
// message naming the offending field, and never crashes or allocates unboundedly (list
// sizes are checked before anything is copied). The *ToProto functions cannot fail.
// Used by the server, the worker and the client alike, so all three agree on the bounds.
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_WIRE_CONVERT_H_
#define FUSETUNE_WIRE_CONVERT_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"
#include "fusetune/proto/fusetune.pb.h"
#include "fusetune/wire/provenance.h"

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
// The metadata entry in which a ReportTrials stream names its worker.
inline constexpr char kWorkerIdMetadata[] = "x-fusetune-worker-id";
// ReportTrials metadata: the token of the lease the uploaded trials were measured under
// (decimal; Job.lease_token), so trials of a stale holder are refused.
inline constexpr char kLeaseTokenMetadata[] = "x-fusetune-lease-token";
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

// OK when `value` has at most `max` characters; InvalidArgument naming `field` otherwise.
absl::Status ValidateText(std::string_view value, size_t max, std::string_view field);

// The row limit of a List* request: 0 means `default_limit`; otherwise it must lie in
// [1, max_limit] (InvalidArgument naming `field` and the range).
absl::StatusOr<int> ListLimitFromProto(int32_t limit, int default_limit, int max_limit,
                                       std::string_view field = "limit");

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

// Job kind names: "tune" and "audit" (the CLI's `submit --kind`, `jobs` output).
std::string_view JobKindName(v1::JobKind kind);  // "?" for a value outside the enum
absl::StatusOr<v1::JobKind> ParseJobKind(std::string_view name);  // InvalidArgument otherwise

// DeviceInfo: backend cpu/cuda/hip, strings within kMaxKeyLength, counts >= 0. The
// proto's device_class, when set, must be a valid class; it is not stored in DeviceInfo
// (DeviceInfo::DeviceClass() derives it), so callers that need it read the proto field.
absl::StatusOr<DeviceInfo> DeviceInfoFromProto(const v1::DeviceInfo& proto);
void DeviceInfoToProto(const DeviceInfo& info, v1::DeviceInfo* proto);  // sets device_class

// Provenance of a GetBestConfigResponse. kFallback has no proto value (the server never
// answers with it) and goes out as PROVENANCE_UNSPECIFIED; any value the client does not
// know (unspecified, or one from a newer server) reads as kFallback.
v1::GetBestConfigResponse::Provenance ConfigProvenanceToProto(ConfigProvenance provenance);
ConfigProvenance ConfigProvenanceFromProto(v1::GetBestConfigResponse::Provenance provenance);

}  // namespace fusetune

#endif  // FUSETUNE_WIRE_CONVERT_H_
