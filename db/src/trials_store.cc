#include "fusetune/db/store.h"

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "fusetune/base/time.h"
#include "fusetune/records/json.h"
#include "nlohmann/json.hpp"
#include "sqlite.h"
#include "store_internal.h"

// The trials table: its JSON columns (samples, timing blocks; bench cells use them too),
// validation, row reader and the Store's trial methods (RecordTrial and RecordedTrials are also the RecordSink's).

namespace fusetune {

using db_internal::CheckRunExists;
using db_internal::Connection;
using db_internal::ReadRows;
using db_internal::RequireLimit;
using db_internal::RequireNonEmpty;
using db_internal::RequirePositiveId;
using db_internal::Statement;

namespace db_internal {

// nlohmann::json throws; every parse is wrapped so that nothing escapes the store.
// NaN samples are written as null (JSON has no NaN) and read back as NaN.
std::string SamplesToJson(const std::vector<double>& samples) {
  nlohmann::json j = nlohmann::json::array();
  for (double v : samples) {
    if (std::isfinite(v)) {
      j.push_back(v);
    } else {
      j.push_back(nullptr);
    }
  }
  return j.dump();
}

absl::StatusOr<std::vector<double>> SamplesFromJson(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_array()) return absl::DataLossError("samples_json is not an array");
    std::vector<double> out;
    out.reserve(j.size());
    for (const auto& v : j) {
      out.push_back(v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN());
    }
    return out;
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("malformed samples JSON in the database: ", e.what()));
  }
}

// Timing blocks of trials and bench cells: the records' JSON form (records/json.h).
std::string BlocksToJson(const std::vector<SampleBlock>& blocks) { return SampleBlocksToJson(blocks); }

absl::StatusOr<std::vector<SampleBlock>> BlocksFromJson(const std::string& text) {
  absl::StatusOr<std::vector<SampleBlock>> blocks = SampleBlocksFromJson(text);
  if (!blocks.ok()) return absl::DataLossError(absl::StrCat(blocks.status().message(), " in the database"));
  return blocks;
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

}  // namespace db_internal

using db_internal::BlocksFromJson;
using db_internal::BlocksToJson;
using db_internal::SamplesFromJson;
using db_internal::SamplesToJson;
using db_internal::ValidateBlocks;

namespace {

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

constexpr char kTrialColumns[] =
    "t.trial_id, t.run_id, t.problem_key, t.config_key, t.attempt, t.outcome, t.message, "
    "t.samples_json, t.median_us, t.p10_us, t.p90_us, t.max_abs_error, t.max_rel_error, "
    "t.checked_elements, t.sm_clock_mhz, t.flops, t.created_unix_ms, t.stage, t.blocks_json, "
    "t.wall_seconds";

absl::StatusOr<Trial> ReadTrial(const Statement& s) {
  Trial t;
  t.trial_id = s.Text(0);
  t.run_id = s.Int64(1);
  t.problem_key = s.Text(2);
  t.config_key = s.Text(3);
  t.attempt = static_cast<int>(s.Int64(4));
  absl::StatusOr<TrialOutcome> outcome = ParseTrialOutcome(s.Text(5));
  if (!outcome.ok()) return absl::DataLossError(outcome.status().message());
  t.outcome = *outcome;
  t.message = s.Text(6);
  FT_DB_ASSIGN_OR_RETURN(t.samples_us, SamplesFromJson(s.Text(7)));
  t.median_us = s.Double(8);
  t.p10_us = s.Double(9);
  t.p90_us = s.Double(10);
  t.max_abs_error = s.Double(11);
  t.max_rel_error = s.Double(12);
  t.checked_elements = s.Int64(13);
  t.sm_clock_mhz = static_cast<int>(s.Int64(14));
  t.flops = s.Double(15);
  t.created_unix_ms = s.Int64(16);
  absl::StatusOr<TrialStage> stage = ParseTrialStage(s.Text(17));
  if (!stage.ok()) return absl::DataLossError(stage.status().message());
  t.stage = *stage;
  FT_DB_ASSIGN_OR_RETURN(t.blocks, BlocksFromJson(s.Text(18)));
  t.wall_seconds = s.Double(19);
  return t;
}

// Inserts trials (already validated) inside the caller's transaction; counts new rows.
absl::StatusOr<int> InsertTrials(Connection& c, const std::vector<Trial>& trials) {
  std::set<int64_t> known_runs;
  int inserted = 0;
  const int64_t now = NowUnixMs();
  for (const Trial& t : trials) {
    if (known_runs.insert(t.run_id).second) FT_DB_RETURN_IF_ERROR(CheckRunExists(c, t.run_id));
    // ON CONFLICT DO NOTHING (not INSERT OR IGNORE): only a duplicate trial_id is ignored;
    // a CHECK or NOT NULL violation still fails loudly.
    FT_DB_ASSIGN_OR_RETURN(
        Statement s,
        c.Prepare("INSERT INTO trials (trial_id, run_id, problem_key, config_key, attempt, "
                  "outcome, message, samples_json, median_us, p10_us, p90_us, max_abs_error, "
                  "max_rel_error, checked_elements, sm_clock_mhz, flops, created_unix_ms, "
                  "stage, blocks_json, wall_seconds) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, "
                  "?16, ?17, ?18, ?19, ?20) ON CONFLICT (trial_id) DO NOTHING"));
    s.Bind(1, t.trial_id)
        .Bind(2, t.run_id)
        .Bind(3, t.problem_key)
        .Bind(4, t.config_key)
        .Bind(5, t.attempt)
        .Bind(6, TrialOutcomeName(t.outcome))
        .Bind(7, t.message)
        .Bind(8, SamplesToJson(t.samples_us))
        .Bind(9, t.median_us)
        .Bind(10, t.p10_us)
        .Bind(11, t.p90_us)
        .Bind(12, t.max_abs_error)
        .Bind(13, t.max_rel_error)
        .Bind(14, t.checked_elements)
        .Bind(15, t.sm_clock_mhz)
        .Bind(16, t.flops)
        .Bind(17, t.created_unix_ms != 0 ? t.created_unix_ms : now)
        .Bind(18, TrialStageName(t.stage))
        .Bind(19, BlocksToJson(t.blocks))
        .Bind(20, t.wall_seconds);
    FT_DB_RETURN_IF_ERROR(s.Run());
    inserted += static_cast<int>(c.Changes());
  }
  return inserted;
}

}  // namespace

// ---- trials

absl::Status Store::RecordTrial(const Trial& trial) {
  return RecordTrialsCountingNew({trial}).status();
}

absl::Status Store::RecordTrials(const std::vector<Trial>& trials) {
  return RecordTrialsCountingNew(trials).status();
}

absl::StatusOr<int> Store::RecordTrialsCountingNew(const std::vector<Trial>& trials) {
  for (const Trial& t : trials) FT_DB_RETURN_IF_ERROR(ValidateTrial(t));
  if (trials.empty()) return 0;
  absl::MutexLock lock(&impl_->mu);
  int inserted = 0;
  FT_DB_RETURN_IF_ERROR(impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(inserted, InsertTrials(c, trials));
    return absl::OkStatus();
  }));
  return inserted;
}

absl::StatusOr<int64_t> Store::CountTrials(int64_t run_id) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  absl::MutexLock lock(&impl_->mu);
  int64_t count = 0;
  FT_DB_RETURN_IF_ERROR(impl_->ReadTransaction([&](Connection& c) -> absl::Status {
    FT_DB_RETURN_IF_ERROR(CheckRunExists(c, run_id));
    FT_DB_ASSIGN_OR_RETURN(Statement s, c.Prepare("SELECT COUNT(*) FROM trials WHERE run_id = ?1"));
    s.Bind(1, run_id);
    FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
    count = row ? s.Int64(0) : 0;
    return absl::OkStatus();
  }));
  return count;
}

absl::StatusOr<std::vector<Trial>> Store::ListTrials(int64_t run_id, std::string_view problem_key) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  absl::MutexLock lock(&impl_->mu);
  std::vector<Trial> out;
  FT_DB_RETURN_IF_ERROR(impl_->ReadTransaction([&](Connection& c) -> absl::Status {
    FT_DB_RETURN_IF_ERROR(CheckRunExists(c, run_id));
    // rowid order is insertion order (rows are never deleted).
    FT_DB_ASSIGN_OR_RETURN(
        Statement s,
        c.Prepare(absl::StrCat("SELECT ", kTrialColumns,
                               " FROM trials t WHERE t.run_id = ?1 "
                               "AND (?2 = '' OR t.problem_key = ?2) ORDER BY t.rowid")));
    s.Bind(1, run_id).Bind(2, problem_key);
    FT_DB_ASSIGN_OR_RETURN(out, ReadRows<Trial>(s, ReadTrial));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<Trial>> Store::RecordedTrials(int64_t run_id) { return ListTrials(run_id); }

absl::StatusOr<std::vector<Trial>> Store::ListTrialsForProblem(std::string_view device_class,
                                                               std::string_view problem_key,
                                                               int limit) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(device_class, "device_class"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(problem_key, "problem_key"));
  FT_DB_RETURN_IF_ERROR(RequireLimit(limit));
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(
      Statement s,
      impl_->conn->Prepare(absl::StrCat("SELECT ", kTrialColumns,
                                        " FROM trials t JOIN runs r ON r.run_id = t.run_id "
                                        "WHERE t.problem_key = ?1 AND r.device_class = ?2 "
                                        "ORDER BY t.created_unix_ms DESC, t.rowid DESC LIMIT ?3")));
  s.Bind(1, problem_key).Bind(2, device_class).Bind(3, limit);
  return ReadRows<Trial>(s, ReadTrial);
}

absl::StatusOr<bool> Store::HasTrial(std::string_view trial_id) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(trial_id, "trial_id"));
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(Statement s,
                         impl_->conn->Prepare("SELECT 1 FROM trials WHERE trial_id = ?1"));
  s.Bind(1, trial_id);
  return s.Step();
}

}  // namespace fusetune
