#include "fusetune/db/store.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "fusetune/base/time.h"
#include "sql.h"
#include "sql_rows.h"
#include "sql_store.h"

// What sweeps, audits and regression checks conclude: the best_configs, regressions and
// audits tables.

namespace fusetune::db_internal {

namespace {

// Row readers: column order = the *Columns lists.

constexpr char kAuditColumns[] =
    "audit_id, run_id, device_class, problem_key, recorded_config_key, best_config_key, "
    "recorded_us, best_us, regret, regret_low, regret_high, rounds, configs_measured, "
    "configs_failed, commit_hash, created_unix_ms";

AuditSummary ReadAudit(const Statement& s) {
  AuditSummary a;
  a.audit_id = s.Int64(0);
  a.run_id = s.IsNull(1) ? 0 : s.Int64(1);
  s.ReadColumns(2, &a.device_class, &a.problem_key, &a.recorded_config_key, &a.best_config_key, &a.recorded_us,
                &a.best_us, &a.regret, &a.regret_low, &a.regret_high, &a.rounds, &a.configs_measured,
                &a.configs_failed, &a.commit, &a.created_unix_ms);
  return a;
}

constexpr char kBestColumns[] =
    "device_class, problem_key, config_key, median_us, p10_us, p90_us, max_abs_error, "
    "max_rel_error, speedup_vs_materialized, speedup_vs_partial, best_materialized_us, "
    "best_partial_us, run_id, commit_hash, updated_unix_ms";

BestConfig ReadBest(const Statement& s) {
  BestConfig b;
  s.ReadColumns(0, &b.device_class, &b.problem_key, &b.config_key, &b.median_us, &b.p10_us, &b.p90_us,
                &b.max_abs_error, &b.max_rel_error, &b.speedup_vs_materialized, &b.speedup_vs_partial,
                &b.best_materialized_us, &b.best_partial_us);
  b.run_id = s.IsNull(12) ? 0 : s.Int64(12);
  b.commit = s.Text(13);
  b.updated_unix_ms = s.Int64(14);
  return b;
}

constexpr char kRegressionColumns[] =
    "regression_id, commit_hash, baseline_commit, device_class, problem_key, config_key, metric, "
    "ratio, p_value, verdict, created_unix_ms";

Regression ReadRegression(const Statement& s) {
  Regression r;
  s.ReadColumns(0, &r.id, &r.commit, &r.baseline_commit, &r.device_class, &r.problem_key, &r.config_key, &r.metric,
                &r.ratio, &r.p_value, &r.verdict, &r.created_unix_ms);
  return r;
}

// Inserts one validated verdict inside the caller's transaction; returns its id. A verdict
// without a time is stamped `now`.
absl::StatusOr<int64_t> InsertRegression(Connection& c, const Regression& r, int64_t now) {
  FT_DB_ASSIGN_OR_RETURN(
      Statement s,
      c.Prepare("INSERT INTO regressions (commit_hash, baseline_commit, device_class, "
                "problem_key, config_key, metric, ratio, p_value, verdict, created_unix_ms) "
                "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"));
  s.BindAll(r.commit, r.baseline_commit, r.device_class, r.problem_key, r.config_key, r.metric, r.ratio, r.p_value,
            r.verdict, r.created_unix_ms != 0 ? r.created_unix_ms : now);
  FT_DB_RETURN_IF_ERROR(s.Run());
  return c.LastInsertRowId();
}

}  // namespace

// ---- best configs

absl::Status SqlStore::UpsertBestConfig(const BestConfig& b) {
  FT_DB_RETURN_IF_ERROR(ValidateBestConfig(b));
  absl::MutexLock lock(&mu_);
  return WriteTransaction([&](Connection& c) -> absl::Status {
    if (b.run_id != 0) FT_DB_RETURN_IF_ERROR(CheckRunExists(c, b.run_id));
    FT_DB_ASSIGN_OR_RETURN(
        Statement s,
        c.Prepare("INSERT INTO best_configs (device_class, problem_key, config_key, median_us, "
                  "p10_us, p90_us, max_abs_error, max_rel_error, speedup_vs_materialized, "
                  "speedup_vs_partial, best_materialized_us, best_partial_us, run_id, "
                  "commit_hash, updated_unix_ms) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15) "
                  "ON CONFLICT (device_class, problem_key) DO UPDATE SET "
                  "config_key = excluded.config_key, median_us = excluded.median_us, "
                  "p10_us = excluded.p10_us, p90_us = excluded.p90_us, "
                  "max_abs_error = excluded.max_abs_error, "
                  "max_rel_error = excluded.max_rel_error, "
                  "speedup_vs_materialized = excluded.speedup_vs_materialized, "
                  "speedup_vs_partial = excluded.speedup_vs_partial, "
                  "best_materialized_us = excluded.best_materialized_us, "
                  "best_partial_us = excluded.best_partial_us, run_id = excluded.run_id, "
                  "commit_hash = excluded.commit_hash, "
                  "updated_unix_ms = excluded.updated_unix_ms"));
    s.BindAll(b.device_class, b.problem_key, b.config_key, b.median_us, b.p10_us, b.p90_us, b.max_abs_error,
              b.max_rel_error, b.speedup_vs_materialized, b.speedup_vs_partial, b.best_materialized_us,
              b.best_partial_us, Statement::IdOrNull{b.run_id}, b.commit,
              b.updated_unix_ms != 0 ? b.updated_unix_ms : NowUnixMs());
    return s.Run();
  });
}

absl::StatusOr<BestConfig> SqlStore::GetBestConfig(std::string_view device_class,
                                                std::string_view problem_key) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(device_class, "device_class"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(problem_key, "problem_key"));
  absl::MutexLock lock(&mu_);
  FT_DB_ASSIGN_OR_RETURN(Statement s,
                         conn_->Prepare(absl::StrCat(
                             "SELECT ", kBestColumns,
                             " FROM best_configs WHERE device_class = ?1 AND problem_key = ?2")));
  s.Bind(1, device_class).Bind(2, problem_key);
  FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) {
    return absl::NotFoundError(absl::StrCat("no best config for '", std::string(problem_key),
                                            "' on '", std::string(device_class), "'"));
  }
  return ReadBest(s);
}

absl::StatusOr<std::vector<BestConfig>> SqlStore::ListBestConfigs(std::string_view device_class) {
  return SelectRows<BestConfig>(absl::StrCat("SELECT ", kBestColumns,
                                             " FROM best_configs WHERE (?1 = '' OR device_class = ?1) "
                                             "ORDER BY problem_key, device_class"),
                                ReadBest, device_class);
}

// ---- regressions

absl::StatusOr<int64_t> SqlStore::RecordRegression(const Regression& r) {
  FT_DB_RETURN_IF_ERROR(ValidateRegression(r));
  absl::MutexLock lock(&mu_);
  int64_t id = 0;
  FT_DB_RETURN_IF_ERROR(WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(id, InsertRegression(c, r, NowUnixMs()));
    return absl::OkStatus();
  }));
  return id;
}

absl::StatusOr<int> SqlStore::RecordRegressions(const std::vector<Regression>& rows) {
  FT_DB_RETURN_IF_ERROR(ValidateRegressions(rows));
  if (rows.empty()) return 0;
  absl::MutexLock lock(&mu_);
  FT_DB_RETURN_IF_ERROR(WriteTransaction([&](Connection& c) -> absl::Status {
    const int64_t now = NowUnixMs();
    for (const Regression& r : rows) FT_DB_RETURN_IF_ERROR(InsertRegression(c, r, now).status());
    return absl::OkStatus();
  }));
  return static_cast<int>(rows.size());
}

absl::StatusOr<std::vector<Regression>> SqlStore::ListRegressions(std::string_view commit, int limit) {
  FT_DB_RETURN_IF_ERROR(RequireLimit(limit));
  return SelectRows<Regression>(absl::StrCat("SELECT ", kRegressionColumns,
                                             " FROM regressions WHERE (?1 = '' OR commit_hash = ?1) "
                                             "ORDER BY regression_id DESC LIMIT ?2"),
                                ReadRegression, commit, limit);
}

// ---- audits

absl::StatusOr<int64_t> SqlStore::RecordAudit(const AuditSummary& a) {
  FT_DB_RETURN_IF_ERROR(ValidateAudit(a));
  absl::MutexLock lock(&mu_);
  int64_t id = 0;
  FT_DB_RETURN_IF_ERROR(WriteTransaction([&](Connection& c) -> absl::Status {
    if (a.run_id != 0) FT_DB_RETURN_IF_ERROR(CheckRunExists(c, a.run_id));
    FT_DB_ASSIGN_OR_RETURN(
        Statement s,
        c.Prepare("INSERT INTO audits (run_id, device_class, problem_key, recorded_config_key, "
                  "best_config_key, recorded_us, best_us, regret, regret_low, regret_high, rounds, "
                  "configs_measured, configs_failed, commit_hash, created_unix_ms) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"));
    s.BindAll(Statement::IdOrNull{a.run_id}, a.device_class, a.problem_key, a.recorded_config_key,
              a.best_config_key, a.recorded_us, a.best_us, a.regret, a.regret_low, a.regret_high, a.rounds,
              a.configs_measured, a.configs_failed, a.commit,
              a.created_unix_ms != 0 ? a.created_unix_ms : NowUnixMs());
    FT_DB_RETURN_IF_ERROR(s.Run());
    FT_DB_ASSIGN_OR_RETURN(id, c.LastInsertRowId());
    return absl::OkStatus();
  }));
  return id;
}

absl::StatusOr<std::vector<AuditSummary>> SqlStore::ListAudits(std::string_view device_class,
                                                            std::string_view problem_key, int limit) {
  FT_DB_RETURN_IF_ERROR(RequireLimit(limit));
  return SelectRows<AuditSummary>(absl::StrCat("SELECT ", kAuditColumns,
                                               " FROM audits WHERE (?1 = '' OR device_class = ?1) "
                                               "AND (?2 = '' OR problem_key = ?2) "
                                               "ORDER BY created_unix_ms DESC, audit_id DESC LIMIT ?3"),
                                  ReadAudit, device_class, problem_key, limit);
}

}  // namespace fusetune::db_internal
