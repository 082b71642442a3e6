#include "fusetune/db/store.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "fusetune/base/time.h"
#include "sqlite.h"
#include "store_internal.h"

// What sweeps, audits and regression checks conclude: the best_configs, regressions and
// audits tables (RecordBestConfig is also the RecordSink's).

namespace fusetune {

using db_internal::CheckRunExists;
using db_internal::Connection;
using db_internal::ReadRows;
using db_internal::RequireLimit;
using db_internal::RequireNonEmpty;
using db_internal::Statement;

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
  a.device_class = s.Text(2);
  a.problem_key = s.Text(3);
  a.recorded_config_key = s.Text(4);
  a.best_config_key = s.Text(5);
  a.recorded_us = s.Double(6);
  a.best_us = s.Double(7);
  a.regret = s.Double(8);
  a.regret_low = s.Double(9);
  a.regret_high = s.Double(10);
  a.rounds = static_cast<int>(s.Int64(11));
  a.configs_measured = static_cast<int>(s.Int64(12));
  a.configs_failed = static_cast<int>(s.Int64(13));
  a.commit = s.Text(14);
  a.created_unix_ms = s.Int64(15);
  return a;
}

constexpr char kBestColumns[] =
    "device_class, problem_key, config_key, median_us, p10_us, p90_us, max_abs_error, "
    "max_rel_error, speedup_vs_materialized, speedup_vs_partial, best_materialized_us, "
    "best_partial_us, run_id, commit_hash, updated_unix_ms";

BestConfig ReadBest(const Statement& s) {
  BestConfig b;
  b.device_class = s.Text(0);
  b.problem_key = s.Text(1);
  b.config_key = s.Text(2);
  b.median_us = s.Double(3);
  b.p10_us = s.Double(4);
  b.p90_us = s.Double(5);
  b.max_abs_error = s.Double(6);
  b.max_rel_error = s.Double(7);
  b.speedup_vs_materialized = s.Double(8);
  b.speedup_vs_partial = s.Double(9);
  b.best_materialized_us = s.Double(10);
  b.best_partial_us = s.Double(11);
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
  r.id = s.Int64(0);
  r.commit = s.Text(1);
  r.baseline_commit = s.Text(2);
  r.device_class = s.Text(3);
  r.problem_key = s.Text(4);
  r.config_key = s.Text(5);
  r.metric = s.Text(6);
  r.ratio = s.Double(7);
  r.p_value = s.Double(8);
  r.verdict = s.Text(9);
  r.created_unix_ms = s.Int64(10);
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
  s.Bind(1, r.commit)
      .Bind(2, r.baseline_commit)
      .Bind(3, r.device_class)
      .Bind(4, r.problem_key)
      .Bind(5, r.config_key)
      .Bind(6, r.metric)
      .Bind(7, r.ratio)
      .Bind(8, r.p_value)
      .Bind(9, r.verdict)
      .Bind(10, r.created_unix_ms != 0 ? r.created_unix_ms : now);
  FT_DB_RETURN_IF_ERROR(s.Run());
  return c.LastInsertRowId();
}

}  // namespace

// ---- best configs

absl::Status Store::UpsertBestConfig(const BestConfig& b) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(b.device_class, "device_class"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(b.problem_key, "problem_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(b.config_key, "config_key"));
  if (b.run_id < 0) return absl::InvalidArgumentError("best config run_id must be >= 0");
  if (b.updated_unix_ms < 0) return absl::InvalidArgumentError("updated_unix_ms must be >= 0");
  absl::MutexLock lock(&impl_->mu);
  return impl_->WriteTransaction([&](Connection& c) -> absl::Status {
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
    s.Bind(1, b.device_class)
        .Bind(2, b.problem_key)
        .Bind(3, b.config_key)
        .Bind(4, b.median_us)
        .Bind(5, b.p10_us)
        .Bind(6, b.p90_us)
        .Bind(7, b.max_abs_error)
        .Bind(8, b.max_rel_error)
        .Bind(9, b.speedup_vs_materialized)
        .Bind(10, b.speedup_vs_partial)
        .Bind(11, b.best_materialized_us)
        .Bind(12, b.best_partial_us)
        .BindIdOrNull(13, b.run_id)
        .Bind(14, b.commit)
        .Bind(15, b.updated_unix_ms != 0 ? b.updated_unix_ms : NowUnixMs());
    return s.Run();
  });
}

absl::Status Store::RecordBestConfig(const BestConfig& best) { return UpsertBestConfig(best); }

absl::StatusOr<BestConfig> Store::GetBestConfig(std::string_view device_class,
                                                std::string_view problem_key) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(device_class, "device_class"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(problem_key, "problem_key"));
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(Statement s,
                         impl_->conn->Prepare(absl::StrCat(
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

absl::StatusOr<std::vector<BestConfig>> Store::ListBestConfigs(std::string_view device_class) {
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(absl::StrCat(
                                          "SELECT ", kBestColumns,
                                          " FROM best_configs WHERE (?1 = '' OR device_class = ?1) "
                                          "ORDER BY problem_key, device_class")));
  s.Bind(1, device_class);
  return ReadRows<BestConfig>(s, ReadBest);
}

// ---- regressions

absl::Status ValidateRegression(const Regression& r) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(r.commit, "commit"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(r.baseline_commit, "baseline_commit"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(r.device_class, "device_class"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(r.problem_key, "problem_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(r.config_key, "config_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(r.metric, "metric"));
  if (std::find(kRegressionVerdicts.begin(), kRegressionVerdicts.end(), r.verdict) == kRegressionVerdicts.end()) {
    std::string names;
    for (std::string_view v : kRegressionVerdicts) absl::StrAppend(&names, names.empty() ? "" : ", ", std::string(v));
    return absl::InvalidArgumentError(absl::StrCat("verdict must be one of ", names, ", got '", r.verdict, "'"));
  }
  if (!std::isfinite(r.ratio) || r.ratio < 0) {
    return absl::InvalidArgumentError(absl::StrCat("ratio must be finite and >= 0, got ", r.ratio));
  }
  if (!(r.p_value >= 0 && r.p_value <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("p_value must be in [0, 1], got ", r.p_value));
  }
  if (r.created_unix_ms < 0) return absl::InvalidArgumentError("created_unix_ms must be >= 0");
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Store::RecordRegression(const Regression& r) {
  FT_DB_RETURN_IF_ERROR(ValidateRegression(r));
  absl::MutexLock lock(&impl_->mu);
  int64_t id = 0;
  FT_DB_RETURN_IF_ERROR(impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(id, InsertRegression(c, r, NowUnixMs()));
    return absl::OkStatus();
  }));
  return id;
}

absl::StatusOr<int> Store::RecordRegressions(const std::vector<Regression>& rows) {
  for (size_t i = 0; i < rows.size(); ++i) {
    if (absl::Status s = ValidateRegression(rows[i]); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("regression ", i, ": ", s.message()));
    }
  }
  if (rows.empty()) return 0;
  absl::MutexLock lock(&impl_->mu);
  FT_DB_RETURN_IF_ERROR(impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    const int64_t now = NowUnixMs();
    for (const Regression& r : rows) FT_DB_RETURN_IF_ERROR(InsertRegression(c, r, now).status());
    return absl::OkStatus();
  }));
  return static_cast<int>(rows.size());
}

absl::StatusOr<std::vector<Regression>> Store::ListRegressions(std::string_view commit, int limit) {
  FT_DB_RETURN_IF_ERROR(RequireLimit(limit));
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(absl::StrCat(
                                          "SELECT ", kRegressionColumns,
                                          " FROM regressions WHERE (?1 = '' OR commit_hash = ?1) "
                                          "ORDER BY regression_id DESC LIMIT ?2")));
  s.Bind(1, commit).Bind(2, limit);
  return ReadRows<Regression>(s, ReadRegression);
}

// ---- audits

absl::StatusOr<int64_t> Store::RecordAudit(const AuditSummary& a) {
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
  absl::MutexLock lock(&impl_->mu);
  int64_t id = 0;
  FT_DB_RETURN_IF_ERROR(impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    if (a.run_id != 0) FT_DB_RETURN_IF_ERROR(CheckRunExists(c, a.run_id));
    FT_DB_ASSIGN_OR_RETURN(
        Statement s,
        c.Prepare("INSERT INTO audits (run_id, device_class, problem_key, recorded_config_key, "
                  "best_config_key, recorded_us, best_us, regret, regret_low, regret_high, rounds, "
                  "configs_measured, configs_failed, commit_hash, created_unix_ms) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"));
    s.BindIdOrNull(1, a.run_id)
        .Bind(2, a.device_class)
        .Bind(3, a.problem_key)
        .Bind(4, a.recorded_config_key)
        .Bind(5, a.best_config_key)
        .Bind(6, a.recorded_us)
        .Bind(7, a.best_us)
        .Bind(8, a.regret)
        .Bind(9, a.regret_low)
        .Bind(10, a.regret_high)
        .Bind(11, a.rounds)
        .Bind(12, a.configs_measured)
        .Bind(13, a.configs_failed)
        .Bind(14, a.commit)
        .Bind(15, a.created_unix_ms != 0 ? a.created_unix_ms : NowUnixMs());
    FT_DB_RETURN_IF_ERROR(s.Run());
    id = c.LastInsertRowId();
    return absl::OkStatus();
  }));
  return id;
}

absl::StatusOr<std::vector<AuditSummary>> Store::ListAudits(std::string_view device_class,
                                                            std::string_view problem_key, int limit) {
  FT_DB_RETURN_IF_ERROR(RequireLimit(limit));
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(
      Statement s, impl_->conn->Prepare(absl::StrCat(
                       "SELECT ", kAuditColumns,
                       " FROM audits WHERE (?1 = '' OR device_class = ?1) AND (?2 = '' OR problem_key = ?2) "
                       "ORDER BY created_unix_ms DESC, audit_id DESC LIMIT ?3")));
  s.Bind(1, device_class).Bind(2, problem_key).Bind(3, limit);
  return ReadRows<AuditSummary>(s, ReadAudit);
}

}  // namespace fusetune
