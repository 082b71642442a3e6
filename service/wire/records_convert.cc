#include "fusetune/wire/records_convert.h"

#include <cmath>
#include <string>
#include <utility>

#include "fusetune/base/strings.h"
#include "field_error.h"

namespace fusetune {
namespace {

using wire_internal::InvalidField;

// A time or count: finite and >= 0.
absl::Status CheckNonNegative(double v, std::string_view field) {
  if (!std::isfinite(v) || v < 0) return InvalidField(field, "must be finite and >= 0");
  return absl::OkStatus();
}

// An error magnitude: >= 0, +inf allowed (non-finite outputs), NaN never.
absl::Status CheckErrorValue(double v, std::string_view field) {
  if (std::isnan(v) || v < 0) return InvalidField(field, "must be >= 0 (+inf allowed, NaN not)");
  return absl::OkStatus();
}

// A trial's samples, summary times, errors and counters (not its blocks).
absl::Status CheckTrialMeasurements(const v1::Trial& proto) {
  if (proto.samples_us_size() > kMaxSamplesPerTrial) {
    return InvalidField("trial.samples_us", Cat("more than ", kMaxSamplesPerTrial, " samples"));
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
  if (auto s = CheckErrorValue(proto.unquantised_rel_error(), "trial.unquantised_rel_error"); !s.ok()) return s;
  if (proto.checked_elements() < 0) return InvalidField("trial.checked_elements", "must be >= 0");
  if (proto.sm_clock_mhz() < 0) return InvalidField("trial.sm_clock_mhz", "must be >= 0");
  if (proto.created_unix_ms() < 0) return InvalidField("trial.created_unix_ms", "must be >= 0");
  if (auto s = CheckNonNegative(proto.wall_seconds(), "trial.wall_seconds"); !s.ok()) return s;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> CommitFromProto(std::string_view commit, std::string_view field) {
  if (commit.empty()) return std::string();
  if (auto s = ValidateText(commit, kMaxKeyLength, field); !s.ok()) return s;
  absl::StatusOr<std::string> canonical = CanonicalCommit(commit);
  if (!canonical.ok()) return InvalidField(field, canonical.status().message());
  return canonical;
}

absl::StatusOr<std::string> CommitFilterFromProto(std::string_view commit, std::string_view field) {
  if (commit.empty()) return std::string();
  if (auto s = ValidateText(commit, kMaxKeyLength, field); !s.ok()) return s;
  absl::StatusOr<CommitName> named = ParseCommitName(commit);
  if (!named.ok()) return InvalidField(field, named.status().message());
  return std::move(named->text);
}

absl::StatusOr<TrialStage> TrialStageFromProto(v1::TrialStage stage) {
  switch (stage) {
    case v1::TRIAL_STAGE_SCREEN: return TrialStage::kScreen;
    case v1::TRIAL_STAGE_FINAL: return TrialStage::kFinal;
    case v1::TRIAL_STAGE_AUDIT: return TrialStage::kAudit;
    case v1::TRIAL_STAGE_HALVING: return TrialStage::kHalving;
    default: break;
  }
  return InvalidField("trial.stage", Cat("unknown stage ", static_cast<int>(stage)));
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
  if (proto.sm_clock_mhz() < 0) return InvalidField(Cat(field, ".sm_clock_mhz"), "must be >= 0");
  if (proto.power_mw() < 0) return InvalidField(Cat(field, ".power_mw"), "must be >= 0");
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
    return InvalidField(Cat(field, ".samples"), Cat("must be in [0, ", kMaxSamplesPerBlock, "]"));
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
  b.graphed = proto.graphed();
  return b;
}

void SampleBlockToProto(const SampleBlock& block, v1::SampleBlock* proto) {
  proto->Clear();
  proto->set_samples(block.samples);
  proto->set_median_us(block.median_us);
  DeviceStateToProto(block.before, proto->mutable_before());
  DeviceStateToProto(block.after, proto->mutable_after());
  proto->set_unsteady(block.unsteady);
  proto->set_graphed(block.graphed);
}

absl::StatusOr<Trial> TrialFromProto(const v1::Trial& proto) {
  Trial t;
  if (!proto.trial_id().empty()) {
    if (auto s = ValidateId(proto.trial_id(), "trial.trial_id"); !s.ok()) return s;
  }
  if (proto.run_id() <= 0) return InvalidField("trial.run_id", "must be > 0");
  if (proto.problem_key().empty()) return InvalidField("trial.problem_key", "must not be empty");
  if (auto s = ValidateText(proto.problem_key(), kMaxKeyLength, "trial.problem_key"); !s.ok()) return s;
  if (auto s = ValidateText(proto.config_key(), kMaxKeyLength, "trial.config_key"); !s.ok()) return s;
  if (auto c = KernelConfig::FromKey(proto.config_key()); !c.ok()) {
    return InvalidField("trial.config_key", c.status().message());
  }
  if (proto.attempt() < 0 || proto.attempt() > kMaxAttempt) {
    return InvalidField("trial.attempt", Cat("must be in [0, ", kMaxAttempt, "]"));
  }
  // Empty: the id is derived here from the same fields, so a retried upload still maps to
  // the same row. Set: it must be that derivation (a mismatch is a client bug, refused).
  auto stage = TrialStageFromProto(proto.stage());
  if (!stage.ok()) return stage.status();
  std::string trial_id =
      TrialId(proto.run_id(), proto.problem_key(), proto.config_key(), proto.attempt(), *stage);
  if (!proto.trial_id().empty() && proto.trial_id() != trial_id) {
    return InvalidField("trial.trial_id",
                   Cat("is not TrialId(run_id, problem_key, config_key, attempt, stage) = '", trial_id, "'"));
  }
  auto outcome = ParseTrialOutcome(proto.outcome());
  if (!outcome.ok()) return InvalidField("trial.outcome", outcome.status().message());
  if (auto s = ValidateText(proto.message(), kMaxTextLength, "trial.message"); !s.ok()) return s;
  if (auto s = CheckTrialMeasurements(proto); !s.ok()) return s;
  if (proto.blocks_size() > kMaxBlocksPerTrial) {
    return InvalidField("trial.blocks", Cat("more than ", kMaxBlocksPerTrial, " blocks"));
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
  t.unquantised_rel_error = proto.unquantised_rel_error();
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
  proto->set_unquantised_rel_error(t.unquantised_rel_error);
  proto->set_checked_elements(t.checked_elements);
  proto->set_sm_clock_mhz(t.sm_clock_mhz);
  proto->set_flops(t.flops);
  proto->set_created_unix_ms(t.created_unix_ms);
  proto->set_stage(TrialStageToProto(t.stage));
  for (const SampleBlock& b : t.blocks) SampleBlockToProto(b, proto->add_blocks());
  proto->set_wall_seconds(t.wall_seconds);
}

absl::StatusOr<AuditSummary> AuditSummaryFromProto(const v1::AuditSummary& proto) {
  if (proto.audit_id() < 0) return InvalidField("audit.audit_id", "must be >= 0");
  if (proto.run_id() < 0) return InvalidField("audit.run_id", "must be >= 0");
  if (!proto.device_class().empty()) {
    if (auto s = ValidateDeviceClass(proto.device_class()); !s.ok()) {
      return absl::InvalidArgumentError(Cat("audit.", s.message()));
    }
  }
  if (proto.problem_key().empty()) return InvalidField("audit.problem_key", "must not be empty");
  if (auto s = ValidateText(proto.problem_key(), kMaxKeyLength, "audit.problem_key"); !s.ok()) return s;
  for (auto [key, name] : {std::pair{&proto.recorded_config_key(), "audit.recorded_config_key"},
                           std::pair{&proto.best_config_key(), "audit.best_config_key"}}) {
    if (auto s = ValidateText(*key, kMaxKeyLength, name); !s.ok()) return s;
    if (auto c = KernelConfig::FromKey(*key); !c.ok()) return InvalidField(name, c.status().message());
  }
  if (auto s = CheckNonNegative(proto.recorded_us(), "audit.recorded_us"); !s.ok()) return s;
  if (auto s = CheckNonNegative(proto.best_us(), "audit.best_us"); !s.ok()) return s;
  for (auto [v, name] : {std::pair{proto.regret(), "audit.regret"}, std::pair{proto.regret_low(), "audit.regret_low"},
                         std::pair{proto.regret_high(), "audit.regret_high"}}) {
    if (!std::isfinite(v) || v <= -1) return InvalidField(name, "must be finite and > -1 (a fraction)");
  }
  if (proto.regret_low() > proto.regret() || proto.regret() > proto.regret_high()) {
    return InvalidField("audit.regret", "must lie within [regret_low, regret_high]");
  }
  if (proto.rounds() < 1) return InvalidField("audit.rounds", "must be >= 1");
  if (proto.configs_measured() < 1) return InvalidField("audit.configs_measured", "must be >= 1");
  if (proto.configs_failed() < 0) return InvalidField("audit.configs_failed", "must be >= 0");
  absl::StatusOr<std::string> commit = CommitFromProto(proto.commit(), "audit.commit");
  if (!commit.ok()) return commit.status();
  if (proto.created_unix_ms() < 0) return InvalidField("audit.created_unix_ms", "must be >= 0");
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
  a.commit = *std::move(commit);
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

}  // namespace fusetune
