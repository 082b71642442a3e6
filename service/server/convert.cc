#include "fusetune/service/convert.h"

#include <cmath>
#include <string>

#include "absl/strings/cord.h"
#include "absl/types/optional.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fusetune/base/strings.h"

namespace fusetune {
namespace {


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

absl::StatusOr<TrialStage> TrialStageFromProto(v1::TrialStage stage) {
  switch (stage) {
    case v1::TRIAL_STAGE_SCREEN: return TrialStage::kScreen;
    case v1::TRIAL_STAGE_FINAL: return TrialStage::kFinal;
    case v1::TRIAL_STAGE_AUDIT: return TrialStage::kAudit;
    case v1::TRIAL_STAGE_HALVING: return TrialStage::kHalving;
    default: break;
  }
  return Invalid("trial.stage", Cat("unknown stage ", static_cast<int>(stage)));
}

v1::TrialStage TrialStageToProto(TrialStage stage) {
  switch (stage) {
    case TrialStage::kScreen: return v1::TRIAL_STAGE_SCREEN;
    case TrialStage::kFinal: return v1::TRIAL_STAGE_FINAL;
    case TrialStage::kAudit: return v1::TRIAL_STAGE_AUDIT;
    case TrialStage::kHalving: return v1::TRIAL_STAGE_HALVING;
  }
  return v1::TRIAL_STAGE_SCREEN;
}

absl::StatusOr<DeviceState> DeviceStateFromProto(const v1::DeviceState& proto, std::string_view field) {
  if (proto.sm_clock_mhz() < 0) return Invalid(Cat(field, ".sm_clock_mhz"), "must be >= 0");
  if (proto.power_mw() < 0) return Invalid(Cat(field, ".power_mw"), "must be >= 0");
  DeviceState d;
  d.known = proto.known();
  d.sm_clock_mhz = proto.sm_clock_mhz();
  d.power_mw = proto.power_mw();
  d.throttle_reasons = proto.throttle_reasons();
  return d;
}

void DeviceStateToProto(const DeviceState& state, v1::DeviceState* proto) {
  proto->Clear();
  proto->set_known(state.known);
  proto->set_sm_clock_mhz(state.sm_clock_mhz);
  proto->set_power_mw(state.power_mw);
  proto->set_throttle_reasons(state.throttle_reasons);
}

absl::StatusOr<SampleBlock> SampleBlockFromProto(const v1::SampleBlock& proto, std::string_view field) {
  if (proto.samples() < 0 || proto.samples() > kMaxSamplesPerBlock) {
    return Invalid(Cat(field, ".samples"), Cat("must be in [0, ", kMaxSamplesPerBlock, "]"));
  }
  if (auto s = CheckNonNegative(proto.median_us(), Cat(field, ".median_us")); !s.ok()) return s;
  auto before = DeviceStateFromProto(proto.before(), Cat(field, ".before"));
  if (!before.ok()) return before.status();
  auto after = DeviceStateFromProto(proto.after(), Cat(field, ".after"));
  if (!after.ok()) return after.status();
  SampleBlock b;
  b.samples = proto.samples();
  b.median_us = proto.median_us();
  b.before = *before;
  b.after = *after;
  b.unsteady = proto.unsteady();
  return b;
}

void SampleBlockToProto(const SampleBlock& block, v1::SampleBlock* proto) {
  proto->Clear();
  proto->set_samples(block.samples);
  proto->set_median_us(block.median_us);
  DeviceStateToProto(block.before, proto->mutable_before());
  DeviceStateToProto(block.after, proto->mutable_after());
  proto->set_unsteady(block.unsteady);
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
  auto stage = TrialStageFromProto(proto.stage());
  if (!stage.ok()) return stage.status();
  std::string trial_id =
      TrialId(proto.run_id(), proto.problem_key(), proto.config_key(), proto.attempt(), *stage);
  if (!proto.trial_id().empty() && proto.trial_id() != trial_id) {
    return Invalid("trial.trial_id",
                   Cat("is not TrialId(run_id, problem_key, config_key, attempt, stage) = '", trial_id, "'"));
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
  if (auto s = CheckNonNegative(proto.wall_seconds(), "trial.wall_seconds"); !s.ok()) return s;
  if (proto.blocks_size() > kMaxBlocksPerTrial) {
    return Invalid("trial.blocks", Cat("more than ", kMaxBlocksPerTrial, " blocks"));
  }
  t.blocks.reserve(static_cast<size_t>(proto.blocks_size()));
  for (int i = 0; i < proto.blocks_size(); ++i) {
    auto block = SampleBlockFromProto(proto.blocks(i), Cat("trial.blocks[", i, "]"));
    if (!block.ok()) return block.status();
    t.blocks.push_back(*block);
  }

  t.trial_id = std::move(trial_id);
  t.run_id = proto.run_id();
  t.problem_key = proto.problem_key();
  t.config_key = proto.config_key();
  t.attempt = proto.attempt();
  t.stage = *stage;
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
  t.wall_seconds = proto.wall_seconds();
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
  proto->set_stage(TrialStageToProto(t.stage));
  for (const SampleBlock& b : t.blocks) SampleBlockToProto(b, proto->add_blocks());
  proto->set_wall_seconds(t.wall_seconds);
}

absl::StatusOr<AuditSummary> AuditSummaryFromProto(const v1::AuditSummary& proto) {
  if (proto.audit_id() < 0) return Invalid("audit.audit_id", "must be >= 0");
  if (proto.run_id() < 0) return Invalid("audit.run_id", "must be >= 0");
  if (!proto.device_class().empty()) {
    if (auto s = ValidateDeviceClass(proto.device_class()); !s.ok()) {
      return absl::InvalidArgumentError(Cat("audit.", s.message()));
    }
  }
  if (proto.problem_key().empty()) return Invalid("audit.problem_key", "must not be empty");
  if (auto s = CheckLength(proto.problem_key(), kMaxKeyLength, "audit.problem_key"); !s.ok()) return s;
  for (auto [key, name] : {std::pair{&proto.recorded_config_key(), "audit.recorded_config_key"},
                           std::pair{&proto.best_config_key(), "audit.best_config_key"}}) {
    if (auto s = CheckLength(*key, kMaxKeyLength, name); !s.ok()) return s;
    if (auto c = KernelConfig::FromKey(*key); !c.ok()) return Invalid(name, c.status().message());
  }
  if (auto s = CheckNonNegative(proto.recorded_us(), "audit.recorded_us"); !s.ok()) return s;
  if (auto s = CheckNonNegative(proto.best_us(), "audit.best_us"); !s.ok()) return s;
  for (auto [v, name] : {std::pair{proto.regret(), "audit.regret"}, std::pair{proto.regret_low(), "audit.regret_low"},
                         std::pair{proto.regret_high(), "audit.regret_high"}}) {
    if (!std::isfinite(v) || v <= -1) return Invalid(name, "must be finite and > -1 (a fraction)");
  }
  if (proto.regret_low() > proto.regret() || proto.regret() > proto.regret_high()) {
    return Invalid("audit.regret", "must lie within [regret_low, regret_high]");
  }
  if (proto.rounds() < 1) return Invalid("audit.rounds", "must be >= 1");
  if (proto.configs_measured() < 1) return Invalid("audit.configs_measured", "must be >= 1");
  if (proto.configs_failed() < 0) return Invalid("audit.configs_failed", "must be >= 0");
  if (auto s = CheckLength(proto.commit(), kMaxKeyLength, "audit.commit"); !s.ok()) return s;
  if (proto.created_unix_ms() < 0) return Invalid("audit.created_unix_ms", "must be >= 0");
  AuditSummary a;
  a.audit_id = proto.audit_id();
  a.run_id = proto.run_id();
  a.device_class = proto.device_class();
  a.problem_key = proto.problem_key();
  a.recorded_config_key = proto.recorded_config_key();
  a.best_config_key = proto.best_config_key();
  a.recorded_us = proto.recorded_us();
  a.best_us = proto.best_us();
  a.regret = proto.regret();
  a.regret_low = proto.regret_low();
  a.regret_high = proto.regret_high();
  a.rounds = proto.rounds();
  a.configs_measured = proto.configs_measured();
  a.configs_failed = proto.configs_failed();
  a.commit = proto.commit();
  a.created_unix_ms = proto.created_unix_ms();
  return a;
}

void AuditSummaryToProto(const AuditSummary& a, v1::AuditSummary* proto) {
  proto->Clear();
  proto->set_audit_id(a.audit_id);
  proto->set_run_id(a.run_id);
  proto->set_device_class(a.device_class);
  proto->set_problem_key(a.problem_key);
  proto->set_recorded_config_key(a.recorded_config_key);
  proto->set_best_config_key(a.best_config_key);
  proto->set_recorded_us(a.recorded_us);
  proto->set_best_us(a.best_us);
  proto->set_regret(a.regret);
  proto->set_regret_low(a.regret_low);
  proto->set_regret_high(a.regret_high);
  proto->set_rounds(a.rounds);
  proto->set_configs_measured(a.configs_measured);
  proto->set_configs_failed(a.configs_failed);
  proto->set_commit(a.commit);
  proto->set_created_unix_ms(a.created_unix_ms);
}

std::string_view JobKindName(v1::JobKind kind) {
  switch (kind) {
    case v1::JOB_KIND_TUNE: return "tune";
    case v1::JOB_KIND_AUDIT: return "audit";
    default: break;
  }
  return "?";
}

absl::StatusOr<v1::JobKind> ParseJobKind(std::string_view name) {
  for (v1::JobKind kind : {v1::JOB_KIND_TUNE, v1::JOB_KIND_AUDIT}) {
    if (JobKindName(kind) == name) return kind;
  }
  return absl::InvalidArgumentError(Cat("unknown job kind '", name, "' (expected tune or audit)"));
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
