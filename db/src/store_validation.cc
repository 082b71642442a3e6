#include "store_validation.h"

#include <cmath>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "status_macros.h"

namespace fusetune::db_internal {

absl::Status RequireNonEmpty(std::string_view value, std::string_view what) {
  if (value.empty())
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), " must not be empty"));
  return absl::OkStatus();
}

absl::Status RequirePositiveId(int64_t id, std::string_view what) {
  if (id <= 0)
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), " must be positive, got ", id));
  return absl::OkStatus();
}

absl::Status RequireLimit(int limit) {
  if (limit <= 0 || limit > kMaxListLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit must be in [1, ", kMaxListLimit, "], got ", limit));
  }
  return absl::OkStatus();
}

absl::Status ValidateBlocks(const std::vector<SampleBlock>& blocks, std::string_view what,
                            bool require_positive_median) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    const SampleBlock& b = blocks[i];
    const bool states_ok = b.before.sm_clock_mhz >= 0 && b.before.power_mw >= 0 &&
                           b.after.sm_clock_mhz >= 0 && b.after.power_mw >= 0;
    const bool median_ok = std::isfinite(b.median_us) && (require_positive_median ? b.median_us > 0 : b.median_us >= 0);
    if (b.samples < 0 || !median_ok || !states_ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          std::string(what), " block ", i, ": samples, sm_clock_mhz and power_mw must be >= 0 and median_us finite and ",
          require_positive_median ? "> 0" : ">= 0", ", got median_us ", b.median_us));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTrial(const Trial& t) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(t.trial_id, "trial_id"));
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(t.run_id, "trial run_id"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(t.problem_key, "trial problem_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(t.config_key, "trial config_key"));
  if (t.attempt < 0) return absl::InvalidArgumentError("trial attempt must be >= 0");
  if (t.checked_elements < 0) return absl::InvalidArgumentError("checked_elements must be >= 0");
  if (t.sm_clock_mhz < 0) return absl::InvalidArgumentError("sm_clock_mhz must be >= 0");
  if (t.created_unix_ms < 0) return absl::InvalidArgumentError("created_unix_ms must be >= 0");
  if (TrialOutcomeName(t.outcome) == "?")
    return absl::InvalidArgumentError("unknown trial outcome");
  if (TrialStageName(t.stage) == "?") return absl::InvalidArgumentError("unknown trial stage");
  if (!std::isfinite(t.wall_seconds) || t.wall_seconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("trial wall_seconds must be finite and >= 0, got ", t.wall_seconds));
  }
  if (std::isnan(t.unquantised_rel_error) || t.unquantised_rel_error < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("trial unquantised_rel_error must be >= 0 (or +inf), got ", t.unquantised_rel_error));
  }
  FT_DB_RETURN_IF_ERROR(ValidateBlocks(t.blocks, "trial", /*require_positive_median=*/false));
  // The id is derived from the fields, so that a retried upload is recognised and two stages
  // of one config never share a row (a final trial under its screen trial's id would be
  // dropped as a duplicate).
  const std::string expected_id = TrialId(t.run_id, t.problem_key, t.config_key, t.attempt, t.stage);
  if (t.trial_id != expected_id) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trial_id '", t.trial_id, "' is not TrialId(run_id, problem_key, config_key, attempt, stage) = '",
        expected_id, "'"));
  }
  return absl::OkStatus();
}

absl::Status ValidateBestConfig(const BestConfig& b) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(b.device_class, "device_class"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(b.problem_key, "problem_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(b.config_key, "config_key"));
  if (b.run_id < 0) return absl::InvalidArgumentError("best config run_id must be >= 0");
  if (b.updated_unix_ms < 0) return absl::InvalidArgumentError("updated_unix_ms must be >= 0");
  return absl::OkStatus();
}

absl::Status ValidateAudit(const AuditSummary& a) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(a.device_class, "audit device_class"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(a.problem_key, "audit problem_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(a.recorded_config_key, "audit recorded_config_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(a.best_config_key, "audit best_config_key"));
  if (a.run_id < 0) return absl::InvalidArgumentError("audit run_id must be >= 0");
  if (a.rounds < 0 || a.configs_measured < 0 || a.configs_failed < 0) {
    return absl::InvalidArgumentError("audit rounds, configs_measured and configs_failed must be >= 0");
  }
  if (a.recorded_us < 0 || a.best_us < 0) {
    return absl::InvalidArgumentError("audit recorded_us and best_us must not be negative");
  }
  if (a.created_unix_ms < 0) return absl::InvalidArgumentError("created_unix_ms must be >= 0");
  return absl::OkStatus();
}

absl::Status ValidateRegressions(const std::vector<Regression>& rows) {
  for (size_t i = 0; i < rows.size(); ++i) {
    if (absl::Status s = ValidateRegression(rows[i]); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("regression ", i, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateBenchCell(int64_t run_id, const BenchCell& cell, size_t index) {
  const std::string what = absl::StrCat("bench cell ", index);
  if (cell.run_id != 0 && cell.run_id != run_id) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has run_id ", cell.run_id, " but is recorded for run ", run_id));
  }
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(cell.suite, what + " suite"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(cell.problem_key, what + " problem_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(cell.problem_json, what + " problem_json"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(cell.config_key, what + " config_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(cell.role, what + " role"));
  if (TrialOutcomeName(cell.outcome) == "?") return absl::InvalidArgumentError(what + ": unknown outcome");
  for (const auto& [name, value] : {std::pair<const char*, double>{"max_abs_error", cell.max_abs_error},
                                    {"max_rel_error", cell.max_rel_error},
                                    {"tolerance", cell.tolerance}}) {
    if (!std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, " ", name, " must be finite and >= 0, got ", value));
    }
  }
  if (cell.created_unix_ms < 0) return absl::InvalidArgumentError(what + " created_unix_ms must be >= 0");
  return db_internal::ValidateBlocks(cell.blocks, what, /*require_positive_median=*/true);
}

namespace {

// Fills the row's identity from the cell and checks it (InvalidArgument naming the row).
absl::Status CompleteChangePoint(const ChangePointRow& cell, size_t index, ChangePointRow& row) {
  const std::string what = absl::StrCat("change point ", index);
  for (auto [field, value] : {std::pair<std::string*, const std::string*>{&row.device_class, &cell.device_class},
                              {&row.suite, &cell.suite},
                              {&row.problem_key, &cell.problem_key},
                              {&row.config_key, &cell.config_key}}) {
    if (field->empty()) *field = *value;
    if (*field != *value) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " belongs to '", *field, "', not to the cell's '", *value, "'"));
    }
  }
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(row.commit, what + " commit"));
  if (row.position < 0) return absl::InvalidArgumentError(what + " position must be >= 0");
  for (const auto& [name, value] : {std::pair<const char*, double>{"mean_before_us", row.mean_before_us},
                                    {"mean_after_us", row.mean_after_us},
                                    {"ratio", row.ratio}}) {
    if (!std::isfinite(value) || value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, " ", name, " must be finite and > 0, got ", value));
    }
  }
  if (!(row.p_value >= 0 && row.p_value <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " p_value must be in [0, 1], got ", row.p_value));
  }
  if (row.direction != "slower" && row.direction != "faster") {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " direction must be 'slower' or 'faster', got '", row.direction, "'"));
  }
  if (row.detected_unix_ms < 0) return absl::InvalidArgumentError(what + " detected_unix_ms must be >= 0");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<ChangePointRow>> CompleteChangePoints(std::string_view device_class,
                                                                 std::string_view suite,
                                                                 std::string_view problem_key,
                                                                 std::string_view config_key,
                                                                 const std::vector<ChangePointRow>& rows) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(device_class, "device_class"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(suite, "suite"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(problem_key, "problem_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(config_key, "config_key"));
  ChangePointRow cell;
  cell.device_class = std::string(device_class);
  cell.suite = std::string(suite);
  cell.problem_key = std::string(problem_key);
  cell.config_key = std::string(config_key);
  std::vector<ChangePointRow> complete = rows;
  std::set<int64_t> positions;
  for (size_t i = 0; i < complete.size(); ++i) {
    FT_DB_RETURN_IF_ERROR(CompleteChangePoint(cell, i, complete[i]));
    if (!positions.insert(complete[i].position).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("change point ", i, ": two change points at position ", complete[i].position));
    }
  }
  return complete;
}

absl::Status ValidateWorker(const WorkerRecord& w) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(w.worker_id, "worker_id"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(w.device_class, "worker device_class"));
  if (w.registered_unix_ms < 0 || w.last_heartbeat_unix_ms < 0) {
    return absl::InvalidArgumentError("worker timestamps must be >= 0");
  }
  return absl::OkStatus();
}

absl::Status ValidateNewJob(const Job& job) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(job.device_class, "job device_class"));
  if (job.problem_keys.empty())
    return absl::InvalidArgumentError("a job needs at least one problem");
  for (const std::string& k : job.problem_keys)
    FT_DB_RETURN_IF_ERROR(RequireNonEmpty(k, "problem key"));
  if (job.max_trials < 0) return absl::InvalidArgumentError("max_trials must be >= 0");
  if (!(job.max_seconds >= 0) || std::isinf(job.max_seconds)) {
    return absl::InvalidArgumentError("max_seconds must be finite and >= 0");
  }
  if (job.created_unix_ms < 0) return absl::InvalidArgumentError("created_unix_ms must be >= 0");
  return absl::OkStatus();
}

}  // namespace fusetune::db_internal
