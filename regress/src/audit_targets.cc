#include "fusetune/regress/audit_targets.h"

#include <utility>

#include "fmt/format.h"

namespace fusetune::regress {

absl::StatusOr<AuditTargets> TargetsOfAllRecords(Store& store, const std::string& device_class,
                                                 const Backend& backend, const ConfigSpaceOptions& space_options) {
  absl::StatusOr<std::vector<BestConfig>> best = store.ListBestConfigs(device_class);
  if (!best.ok()) return best.status();
  if (best->empty()) return absl::NotFoundError(fmt::format("no best configs recorded on {}", device_class));
  AuditTargets targets;
  for (const BestConfig& b : *best) {
    absl::StatusOr<AttentionProblem> p = AttentionProblem::FromKey(b.problem_key);
    if (!p.ok()) {
      // Varlen and padded keys carry only a hash of their lengths: the shape is not in the
      // database, so such a problem is audited by naming it in full, not from its record.
      targets.notes.push_back(fmt::format("{}: skipped, the problem cannot be rebuilt from its key ({})", b.problem_key,
                                          std::string(p.status().message())));
      continue;
    }
    absl::StatusOr<KernelConfig> c = KernelConfig::FromKey(b.config_key);
    if (!c.ok()) {
      targets.notes.push_back(fmt::format("{}: recorded config '{}' cannot be read: {}", b.problem_key, b.config_key,
                                          std::string(c.status().message())));
      ++targets.failures;
      continue;
    }
    if (absl::StatusOr<ConfigSpace> space = ConfigSpace::Create(*p, backend, space_options); !space.ok()) {
      targets.notes.push_back(fmt::format("{}: {}", b.problem_key, std::string(space.status().message())));
      ++targets.failures;
      continue;
    }
    targets.list.push_back({*p, *c});
  }
  return targets;
}

absl::StatusOr<AuditTargets> TargetsOfProblems(Store& store, const std::string& device_class,
                                               const std::vector<AttentionProblem>& problems) {
  AuditTargets targets;
  for (const AttentionProblem& p : problems) {
    absl::StatusOr<BestConfig> best = store.GetBestConfig(device_class, p.Key());
    if (absl::IsNotFound(best.status())) {
      targets.notes.push_back(
          fmt::format("{}: no best config recorded on {} (run 'fusetune sweep' first)", p.Key(), device_class));
      continue;
    }
    if (!best.ok()) return best.status();
    absl::StatusOr<KernelConfig> c = KernelConfig::FromKey(best->config_key);
    if (!c.ok()) {
      targets.notes.push_back(fmt::format("{}: recorded config '{}' cannot be read: {}", p.Key(), best->config_key,
                                          std::string(c.status().message())));
      ++targets.failures;
      continue;
    }
    targets.list.push_back({p, *c});
  }
  return targets;
}

absl::StatusOr<AuditSummary> RecordTrialsAndSummary(const AuditRecording& to, const AuditResult& result) {
  AuditSummary summary = result.summary;
  summary.run_id = to.run_id;
  summary.device_class = to.device_class;
  summary.commit = to.commit;
  if (absl::Status s = to.store.RecordTrials(result.trials); !s.ok()) {
    return absl::Status(s.code(), fmt::format("recording the audit's trials: {}", s.ToString()));
  }
  absl::StatusOr<int64_t> audit_id = to.store.RecordAudit(summary);
  if (!audit_id.ok()) {
    return absl::Status(audit_id.status().code(), fmt::format("recording the audit: {}", audit_id.status().ToString()));
  }
  summary.audit_id = *audit_id;
  return summary;
}

absl::StatusOr<AuditedTargets> AuditEach(const std::vector<AuditTarget>& targets, Backend& backend,
                                         const AuditOptions& options, const AuditRecording& to,
                                         const std::atomic<bool>* cancel, const AuditEvents& events) {
  AuditedTargets audited;
  for (const AuditTarget& t : targets) {
    absl::StatusOr<AuditResult> result = RunAudit(backend, t.problem, t.recorded, options, to.run_id, cancel);
    if (absl::IsCancelled(result.status())) {
      audited.cancelled = true;
      break;
    }
    if (!result.ok()) {
      if (events.on_failed) events.on_failed(t, result.status());
      ++audited.failures;
      continue;
    }
    absl::StatusOr<AuditSummary> summary = RecordTrialsAndSummary(to, *result);
    if (!summary.ok()) return summary.status();
    if (events.on_audited) events.on_audited(*summary, *result);
    audited.summaries.push_back(*std::move(summary));
    // A stop during the last measurement of an audit that still completed: keep the audit,
    // start no other.
    if (cancel != nullptr && cancel->load()) {
      audited.cancelled = true;
      break;
    }
  }
  return audited;
}

}  // namespace fusetune::regress
