#include "fusetune/service/convert.h"

#include <cmath>
#include <string>

#include "absl/strings/cord.h"
#include "absl/types/optional.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "string_util.h"

namespace fusetune {
namespace {

using service_internal::Cat;
using service_internal::ToAbsl;
using service_internal::ToStd;

absl::Status Invalid(std::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(Cat(field, ": ", what));
}

absl::Status CheckLength(std::string_view value, size_t max, std::string_view field) {
  if (value.size() > max) {
    return Invalid(field, Cat("longer than ", max, " characters (", value.size(), ")"));
  }
  return absl::OkStatus();
}

bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == ':' || c == '@' || c == '+' || c == '-';
}

// A time or count: finite and >= 0.
absl::Status CheckNonNegative(double v, std::string_view field) {
  if (!std::isfinite(v) || v < 0) return Invalid(field, "must be finite and >= 0");
  return absl::OkStatus();
}

// An error magnitude: >= 0, +inf allowed (non-finite outputs), NaN never.
absl::Status CheckErrorValue(double v, std::string_view field) {
  if (std::isnan(v) || v < 0) return Invalid(field, "must be >= 0 (+inf allowed, NaN not)");
  return absl::OkStatus();
}

template <typename Repeated>
absl::Status CopyLengths(const Repeated& from, std::vector<int32_t>* to, std::string_view field) {
  if (from.size() > kMaxBatch + 1) {
    return Invalid(field, Cat("more than ", kMaxBatch + 1, " entries"));
  }
  to->assign(from.begin(), from.end());
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateDeviceClass(std::string_view device_class) {
  if (device_class.empty()) return Invalid("device_class", "must not be empty");
  if (auto s = CheckLength(device_class, kMaxDeviceClassLength, "device_class"); !s.ok()) return s;
  // CPU model names bring '(', ')', '@' ("Intel(R)-Xeon(R)-CPU-@-2.20GHz"): printable ASCII
  // is allowed except whitespace, quotes and backslashes.
  for (char c : device_class) {
    if (c <= ' ' || c > '~' || c == '"' || c == '\\' || c == '\'' || c == '`') {
      return Invalid("device_class", "has whitespace, a quote, a backslash or a non-ASCII character");
    }
  }
  std::vector<absl::string_view> parts = absl::StrSplit(ToAbsl(device_class), '/');
  if (parts.size() != 3 || parts[0].empty() || parts[1].empty() || parts[2].empty()) {
    return Invalid("device_class",
                   Cat("'", device_class, "' is not of the form backend/name/arch"));
  }
  if (parts[0] != "cpu" && parts[0] != "cuda" && parts[0] != "hip") {
    return Invalid("device_class", Cat("unknown backend '", parts[0],
                                                "' (expected cpu, cuda or hip)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateId(std::string_view id, std::string_view field) {
  if (id.empty()) return Invalid(field, "must not be empty");
  if (auto s = CheckLength(id, kMaxIdLength, field); !s.ok()) return s;
  for (char c : id) {
    if (!IsIdChar(c)) return Invalid(field, "has a character outside [A-Za-z0-9._:@+-]");
  }
  return absl::OkStatus();
}

absl::StatusOr<AttentionProblem> ProblemFromProto(const v1::Problem& proto) {
  AttentionProblem p;
  if (!proto.kind().empty()) {
    auto kind = ParseProblemKind(proto.kind());
    if (!kind.ok()) return Invalid("problem.kind", kind.status().message());
    p.kind = *kind;
  }
  p.batch = proto.batch();
  p.q_heads = proto.q_heads();
  p.kv_heads = proto.kv_heads() == 0 ? proto.q_heads() : proto.kv_heads();
  p.q_len = proto.q_len();
  p.kv_len = proto.kv_len();
  p.head_dim = proto.head_dim();
  p.causal = proto.causal();
  if (!proto.dtype().empty()) {
    auto dtype = ParseDType(proto.dtype());
    if (!dtype.ok()) return Invalid("problem.dtype", dtype.status().message());
    p.dtype = *dtype;
  }
  p.softmax_scale = proto.softmax_scale();
  p.page_block_size = proto.page_block_size();
  if (auto s = CopyLengths(proto.cu_seqlens_q(), &p.cu_seqlens_q, "problem.cu_seqlens_q"); !s.ok()) return s;
  if (auto s = CopyLengths(proto.cu_seqlens_k(), &p.cu_seqlens_k, "problem.cu_seqlens_k"); !s.ok()) return s;
  if (auto s = CopyLengths(proto.kv_valid_lens(), &p.kv_valid_lens, "problem.kv_valid_lens"); !s.ok()) return s;
  if (auto s = p.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(Cat("problem: ", s.message()));
  }
  return p;
}

absl::StatusOr<AttentionProblem> JobProblemFromProto(const v1::Problem& proto) {
  auto p = ProblemFromProto(proto);
  if (!p.ok()) return p.status();
  if (p->QElements() > kMaxJobTensorElements || p->KVElements() > kMaxJobTensorElements) {
    return Invalid("problem", Cat("too large to tune: a tensor exceeds ",
                                           kMaxJobTensorElements, " elements (", p->Key(), ")"));
  }
  return p;
}

void ProblemToProto(const AttentionProblem& p, v1::Problem* proto) {
  proto->Clear();
  proto->set_kind(std::string(ProblemKindName(p.kind)));
  proto->set_batch(p.batch);
  proto->set_q_heads(p.q_heads);
  proto->set_kv_heads(p.kv_heads);
  proto->set_q_len(p.q_len);
  proto->set_kv_len(p.kv_len);
  proto->set_head_dim(p.head_dim);
  proto->set_causal(p.causal);
  proto->set_dtype(std::string(DTypeName(p.dtype)));
  proto->set_softmax_scale(p.softmax_scale);
  proto->set_page_block_size(p.page_block_size);
  proto->mutable_cu_seqlens_q()->Add(p.cu_seqlens_q.begin(), p.cu_seqlens_q.end());
  proto->mutable_cu_seqlens_k()->Add(p.cu_seqlens_k.begin(), p.cu_seqlens_k.end());
  proto->mutable_kv_valid_lens()->Add(p.kv_valid_lens.begin(), p.kv_valid_lens.end());
}

absl::StatusOr<KernelConfig> ConfigFromProto(const v1::Config& proto) {
  if (auto s = CheckLength(proto.key(), kMaxKeyLength, "config.key"); !s.ok()) return s;
  if (proto.variant().empty()) {
    if (proto.key().empty()) return Invalid("config", "neither variant nor key is set");
    auto c = KernelConfig::FromKey(proto.key());
    if (!c.ok()) return Invalid("config.key", c.status().message());
    return c;
  }
  KernelConfig c;
  auto variant = ParseVariant(proto.variant());
  if (!variant.ok()) return Invalid("config.variant", variant.status().message());
  c.variant = *variant;
  auto precision = ParsePrecision(proto.precision().empty() ? "fp32" : proto.precision());
  if (!precision.ok()) return Invalid("config.precision", precision.status().message());
  c.precision = *precision;
  c.block_m = proto.block_m();
  c.block_s = proto.block_s();
  c.threads = proto.threads();
  c.stages = proto.stages();
  c.split_kv = proto.split_kv() == 0 ? 1 : proto.split_kv();
  if (auto s = c.Validate(); !s.ok()) return Invalid("config", s.message());
  if (!proto.key().empty() && proto.key() != c.Key()) {
    return Invalid("config.key", Cat("'", proto.key(), "' disagrees with the fields ('",
                                              c.Key(), "')"));
  }
  return c;
}

void ConfigToProto(const KernelConfig& c, v1::Config* proto) {
  proto->Clear();
  proto->set_variant(std::string(VariantName(c.variant)));
  proto->set_block_m(c.block_m);
  proto->set_block_s(c.block_s);
  proto->set_threads(c.threads);
  proto->set_precision(std::string(PrecisionName(c.precision)));
  proto->set_stages(c.stages);
  proto->set_split_kv(c.split_kv);
  proto->set_key(c.Key());
}

absl::StatusOr<Trial> TrialFromProto(const v1::Trial& proto) {
  Trial t;
  if (!proto.trial_id().empty()) {
    if (auto s = ValidateId(proto.trial_id(), "trial.trial_id"); !s.ok()) return s;
  }
  if (proto.run_id() <= 0) return Invalid("trial.run_id", "must be > 0");
  if (proto.problem_key().empty()) return Invalid("trial.problem_key", "must not be empty");
  if (auto s = CheckLength(proto.problem_key(), kMaxKeyLength, "trial.problem_key"); !s.ok()) return s;
  if (auto s = CheckLength(proto.config_key(), kMaxKeyLength, "trial.config_key"); !s.ok()) return s;
  if (auto c = KernelConfig::FromKey(proto.config_key()); !c.ok()) {
    return Invalid("trial.config_key", c.status().message());
  }
  if (proto.attempt() < 0 || proto.attempt() > kMaxAttempt) {
    return Invalid("trial.attempt", Cat("must be in [0, ", kMaxAttempt, "]"));
  }
  // Empty: the id is derived here from the same fields, so a retried upload still maps to
  // the same row. Set: it must be that derivation (a mismatch is a client bug, refused).
  std::string trial_id = TrialId(proto.run_id(), proto.problem_key(), proto.config_key(), proto.attempt());
  if (!proto.trial_id().empty() && proto.trial_id() != trial_id) {
    return Invalid("trial.trial_id",
                   Cat("is not TrialId(run_id, problem_key, config_key, attempt) = '", trial_id, "'"));
  }
  auto outcome = ParseTrialOutcome(proto.outcome());
  if (!outcome.ok()) return Invalid("trial.outcome", outcome.status().message());
  if (auto s = CheckLength(proto.message(), kMaxTextLength, "trial.message"); !s.ok()) return s;
  if (proto.samples_us_size() > kMaxSamplesPerTrial) {
    return Invalid("trial.samples_us", Cat("more than ", kMaxSamplesPerTrial, " samples"));
  }
  for (double v : proto.samples_us()) {
    if (auto s = CheckNonNegative(v, "trial.samples_us"); !s.ok()) return s;
  }
  for (auto [v, name] : {std::pair{proto.median_us(), "trial.median_us"},
                         std::pair{proto.p10_us(), "trial.p10_us"},
                         std::pair{proto.p90_us(), "trial.p90_us"},
                         std::pair{proto.flops(), "trial.flops"}}) {
    if (auto s = CheckNonNegative(v, name); !s.ok()) return s;
  }
  if (auto s = CheckErrorValue(proto.max_abs_error(), "trial.max_abs_error"); !s.ok()) return s;
  if (auto s = CheckErrorValue(proto.max_rel_error(), "trial.max_rel_error"); !s.ok()) return s;
  if (proto.checked_elements() < 0) return Invalid("trial.checked_elements", "must be >= 0");
  if (proto.sm_clock_mhz() < 0) return Invalid("trial.sm_clock_mhz", "must be >= 0");
  if (proto.created_unix_ms() < 0) return Invalid("trial.created_unix_ms", "must be >= 0");

  t.trial_id = std::move(trial_id);
  t.run_id = proto.run_id();
  t.problem_key = proto.problem_key();
  t.config_key = proto.config_key();
  t.attempt = proto.attempt();
  t.outcome = *outcome;
  t.message = proto.message();
  t.samples_us.assign(proto.samples_us().begin(), proto.samples_us().end());
  t.median_us = proto.median_us();
  t.p10_us = proto.p10_us();
  t.p90_us = proto.p90_us();
  t.max_abs_error = proto.max_abs_error();
  t.max_rel_error = proto.max_rel_error();
  t.checked_elements = proto.checked_elements();
  t.sm_clock_mhz = proto.sm_clock_mhz();
  t.flops = proto.flops();
  t.created_unix_ms = proto.created_unix_ms();
  return t;
}

void TrialToProto(const Trial& t, v1::Trial* proto) {
  proto->Clear();
  proto->set_trial_id(t.trial_id);
  proto->set_run_id(t.run_id);
  proto->set_problem_key(t.problem_key);
  proto->set_config_key(t.config_key);
  proto->set_attempt(t.attempt);
  proto->set_outcome(std::string(TrialOutcomeName(t.outcome)));
  proto->set_message(t.message);
  proto->mutable_samples_us()->Add(t.samples_us.begin(), t.samples_us.end());
  proto->set_median_us(t.median_us);
  proto->set_p10_us(t.p10_us);
  proto->set_p90_us(t.p90_us);
  proto->set_max_abs_error(t.max_abs_error);
  proto->set_max_rel_error(t.max_rel_error);
  proto->set_checked_elements(t.checked_elements);
  proto->set_sm_clock_mhz(t.sm_clock_mhz);
  proto->set_flops(t.flops);
  proto->set_created_unix_ms(t.created_unix_ms);
}

absl::StatusOr<DeviceInfo> DeviceInfoFromProto(const v1::DeviceInfo& proto) {
  if (proto.backend() != "cpu" && proto.backend() != "cuda" && proto.backend() != "hip") {
    return Invalid("device.backend", Cat("unknown backend '", proto.backend().substr(0, 64),
                                                  "' (expected cpu, cuda or hip)"));
  }
  for (auto [v, name] : {std::pair{&proto.name(), "device.name"}, std::pair{&proto.arch(), "device.arch"},
                         std::pair{&proto.driver(), "device.driver"}}) {
    if (auto s = CheckLength(*v, kMaxKeyLength, name); !s.ok()) return s;
  }
  if (proto.device_index() < 0 || proto.sm_count() < 0 || proto.shared_mem_per_block() < 0 ||
      proto.l2_bytes() < 0 || proto.memory_bytes() < 0 || proto.max_clock_mhz() < 0) {
    return Invalid("device", "counts and sizes must be >= 0");
  }
  if (!proto.device_class().empty()) {
    if (auto s = ValidateDeviceClass(proto.device_class()); !s.ok()) return s;
  }
  DeviceInfo d;
  d.backend = proto.backend();
  d.name = proto.name();
  d.arch = proto.arch();
  d.device_index = proto.device_index();
  d.sm_count = proto.sm_count();
  d.shared_mem_per_block = proto.shared_mem_per_block();
  d.l2_bytes = proto.l2_bytes();
  d.memory_bytes = proto.memory_bytes();
  d.driver = proto.driver();
  d.max_clock_mhz = proto.max_clock_mhz();
  return d;
}

void DeviceInfoToProto(const DeviceInfo& d, v1::DeviceInfo* proto) {
  proto->Clear();
  proto->set_backend(d.backend);
  proto->set_name(d.name);
  proto->set_arch(d.arch);
  proto->set_device_index(d.device_index);
  proto->set_sm_count(d.sm_count);
  proto->set_shared_mem_per_block(d.shared_mem_per_block);
  proto->set_l2_bytes(d.l2_bytes);
  proto->set_memory_bytes(d.memory_bytes);
  proto->set_driver(d.driver);
  proto->set_max_clock_mhz(d.max_clock_mhz);
  proto->set_device_class(d.DeviceClass());
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::Status FromGrpcCall(const grpc::Status& status, const grpc::ClientContext& finished_call) {
  absl::Status out = FromGrpcStatus(status);
  if (out.ok()) return out;
  const auto& trailers = finished_call.GetServerTrailingMetadata();
  if (auto it = trailers.find(kErrorReasonMetadata); it != trailers.end()) {
    out.SetPayload(kErrorReasonMetadata, absl::Cord(absl::string_view(it->second.data(), it->second.size())));
  }
  return out;
}

std::string ErrorReason(const absl::Status& status) {
  absl::optional<absl::Cord> reason = status.GetPayload(kErrorReasonMetadata);
  return reason ? std::string(*reason) : std::string();
}

}  // namespace fusetune
