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
#include "sql.h"
#include "sql_rows.h"
#include "sql_store.h"

// The trials table: its JSON columns (samples, timing blocks; bench cells use them too),
// validation, row reader and the Store's trial methods.

namespace fusetune::db_internal {

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

namespace {

constexpr char kTrialColumns[] =
    "t.trial_id, t.run_id, t.problem_key, t.config_key, t.attempt, t.outcome, t.message, "
    "t.samples_json, t.median_us, t.p10_us, t.p90_us, t.max_abs_error, t.max_rel_error, "
    "t.checked_elements, t.sm_clock_mhz, t.flops, t.created_unix_ms, t.stage, t.blocks_json, "
    "t.wall_seconds, t.unquantised_rel_error";

absl::StatusOr<Trial> ReadTrial(const Statement& s) {
  Trial t;
  s.ReadColumns(0, &t.trial_id, &t.run_id, &t.problem_key, &t.config_key, &t.attempt);
  absl::StatusOr<TrialOutcome> outcome = ParseTrialOutcome(s.Text(5));
  if (!outcome.ok()) return absl::DataLossError(outcome.status().message());
  t.outcome = *outcome;
  t.message = s.Text(6);
  FT_DB_ASSIGN_OR_RETURN(t.samples_us, SamplesFromJson(s.Text(7)));
  s.ReadColumns(8, &t.median_us, &t.p10_us, &t.p90_us, &t.max_abs_error, &t.max_rel_error, &t.checked_elements,
                &t.sm_clock_mhz, &t.flops, &t.created_unix_ms);
  absl::StatusOr<TrialStage> stage = ParseTrialStage(s.Text(17));
  if (!stage.ok()) return absl::DataLossError(stage.status().message());
  t.stage = *stage;
  FT_DB_ASSIGN_OR_RETURN(t.blocks, BlocksFromJson(s.Text(18)));
  t.wall_seconds = s.Double(19);
  t.unquantised_rel_error = s.Double(20);
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
                  "stage, blocks_json, wall_seconds, unquantised_rel_error) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, "
                  "?16, ?17, ?18, ?19, ?20, ?21) ON CONFLICT (trial_id) DO NOTHING"));
    s.BindAll(t.trial_id, t.run_id, t.problem_key, t.config_key, t.attempt, TrialOutcomeName(t.outcome), t.message,
              SamplesToJson(t.samples_us), t.median_us, t.p10_us, t.p90_us, t.max_abs_error, t.max_rel_error,
              t.checked_elements, t.sm_clock_mhz, t.flops, t.created_unix_ms != 0 ? t.created_unix_ms : now,
              TrialStageName(t.stage), BlocksToJson(t.blocks), t.wall_seconds, t.unquantised_rel_error);
    FT_DB_RETURN_IF_ERROR(s.Run());
    inserted += static_cast<int>(c.Changes());
  }
  return inserted;
}

}  // namespace

// ---- trials

absl::StatusOr<int> SqlStore::RecordTrialsCountingNew(const std::vector<Trial>& trials) {
  for (const Trial& t : trials) FT_DB_RETURN_IF_ERROR(ValidateTrial(t));
  if (trials.empty()) return 0;
  absl::MutexLock lock(&mu_);
  int inserted = 0;
  FT_DB_RETURN_IF_ERROR(WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(inserted, InsertTrials(c, trials));
    return absl::OkStatus();
  }));
  return inserted;
}

absl::StatusOr<int64_t> SqlStore::CountTrials(int64_t run_id) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  absl::MutexLock lock(&mu_);
  int64_t count = 0;
  FT_DB_RETURN_IF_ERROR(ReadTransaction([&](Connection& c) -> absl::Status {
    FT_DB_RETURN_IF_ERROR(CheckRunExists(c, run_id));
    FT_DB_ASSIGN_OR_RETURN(Statement s, c.Prepare("SELECT COUNT(*) FROM trials WHERE run_id = ?1"));
    s.Bind(1, run_id);
    FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
    count = row ? s.Int64(0) : 0;
    return absl::OkStatus();
  }));
  return count;
}

absl::StatusOr<std::vector<Trial>> SqlStore::ListTrials(int64_t run_id, std::string_view problem_key) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  absl::MutexLock lock(&mu_);
  std::vector<Trial> out;
  FT_DB_RETURN_IF_ERROR(ReadTransaction([&](Connection& c) -> absl::Status {
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

absl::StatusOr<std::vector<Trial>> SqlStore::ListTrialsForProblem(std::string_view device_class,
                                                               std::string_view problem_key,
                                                               int limit) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(device_class, "device_class"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(problem_key, "problem_key"));
  FT_DB_RETURN_IF_ERROR(RequireLimit(limit));
  return SelectRows<Trial>(absl::StrCat("SELECT ", kTrialColumns,
                                        " FROM trials t JOIN runs r ON r.run_id = t.run_id "
                                        "WHERE t.problem_key = ?1 AND r.device_class = ?2 "
                                        "ORDER BY t.created_unix_ms DESC, t.rowid DESC LIMIT ?3"),
                           ReadTrial, problem_key, device_class, limit);
}

absl::StatusOr<bool> SqlStore::HasTrial(std::string_view trial_id) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(trial_id, "trial_id"));
  absl::MutexLock lock(&mu_);
  FT_DB_ASSIGN_OR_RETURN(Statement s,
                         conn_->Prepare("SELECT 1 FROM trials WHERE trial_id = ?1"));
  s.Bind(1, trial_id);
  return s.Step();
}

}  // namespace fusetune::db_internal
