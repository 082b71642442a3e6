#include "fusetune/db/store.h"

#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "fusetune/base/time.h"
#include "fusetune/records/json.h"
#include "schema.h"
#include "sql.h"
#include "sql_rows.h"
#include "sql_store.h"

// The SqlStore: transactions, the schema version, runs and commits. The other tables'
// methods are in sql_trials.cc, sql_results.cc, sql_bench.cc, sql_change_points.cc and
// sql_jobs.cc; opening is sqlite_open.cc's and postgres_open.cc's.

namespace fusetune::db_internal {

absl::Status CheckRunExists(Connection& c, int64_t run_id) {
  FT_DB_ASSIGN_OR_RETURN(Statement s, c.Prepare("SELECT 1 FROM runs WHERE run_id = ?1"));
  s.Bind(1, run_id);
  FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
  return absl::OkStatus();
}

absl::Status SqlStore::WriteTransaction(const std::function<absl::Status(Connection&)>& body) {
  if (access_ == StoreAccess::kReadOnly) {
    return absl::PermissionDeniedError(absl::StrCat(
        "database ", conn_->path(), " was opened read-only; writing needs a Store opened with StoreAccess::kReadWrite"));
  }
  FT_DB_RETURN_IF_ERROR(conn_->BeginWrite());
  absl::Status st = body(*conn_);
  if (st.ok()) st = conn_->Exec("COMMIT");
  if (!st.ok() && conn_->InTransaction()) {
    (void)conn_->Exec("ROLLBACK");  // the body's error is the one worth reporting
  }
  return st;
}

absl::Status SqlStore::ReadTransaction(const std::function<absl::Status(Connection&)>& body) {
  FT_DB_RETURN_IF_ERROR(conn_->BeginRead());
  absl::Status st = body(*conn_);
  if (conn_->InTransaction()) {
    absl::Status end = conn_->Exec(st.ok() ? "COMMIT" : "ROLLBACK");
    if (st.ok()) st = end;
  }
  return st;
}

namespace {

// The database's copy of a JSON record is its own: a malformed one is damage.
absl::StatusOr<DeviceInfo> DeviceFromJson(const std::string& text) {
  absl::StatusOr<DeviceInfo> d = DeviceInfoFromJson(text);
  if (!d.ok()) return absl::DataLossError(absl::StrCat(d.status().message(), " in the database"));
  return d;
}

}  // namespace

const char kRunColumns[] =
    "run_id, commit_hash, host, device_json, tool_version, environment, label, "
    "started_unix_ms, finished_unix_ms";

absl::StatusOr<RunInfo> ReadRun(const Statement& s) {
  RunInfo r;
  s.ReadColumns(0, &r.run_id, &r.commit, &r.host);
  FT_DB_ASSIGN_OR_RETURN(r.device, DeviceFromJson(s.Text(3)));
  s.ReadColumns(4, &r.tool_version, &r.environment, &r.label, &r.started_unix_ms, &r.finished_unix_ms);
  return r;
}

// ---- schema

absl::Status SqlStore::Migrate() {
  absl::MutexLock lock(&mu_);
  // The version is read again inside the write transaction: another process may have
  // migrated (or upgraded the database) since the opener looked.
  const std::string name = conn_->path();
  return WriteTransaction([&](Connection& c) { return ApplyMigrations(c, Migrations(), name); });
}

absl::StatusOr<int> SqlStore::SchemaVersion() {
  absl::MutexLock lock(&mu_);
  return conn_->ReadSchemaVersion();
}

// ---- runs

absl::StatusOr<int64_t> SqlStore::BeginRun(const RunInfo& info) {
  if (info.started_unix_ms < 0 || info.finished_unix_ms < 0) {
    return absl::InvalidArgumentError("run timestamps must be >= 0");
  }
  absl::MutexLock lock(&mu_);
  int64_t run_id = 0;
  FT_DB_RETURN_IF_ERROR(WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(
        Statement s,
        c.Prepare("INSERT INTO runs (commit_hash, host, device_class, device_json, backend, "
                  "tool_version, environment, label, started_unix_ms, finished_unix_ms) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"));
    s.BindAll(info.commit, info.host, info.device.DeviceClass(), DeviceInfoToJson(info.device), info.device.backend,
              info.tool_version, info.environment, info.label,
              info.started_unix_ms != 0 ? info.started_unix_ms : NowUnixMs(), info.finished_unix_ms);
    FT_DB_RETURN_IF_ERROR(s.Run());
    FT_DB_ASSIGN_OR_RETURN(run_id, c.LastInsertRowId());
    return absl::OkStatus();
  }));
  return run_id;
}

absl::Status SqlStore::FinishRun(int64_t run_id) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  absl::MutexLock lock(&mu_);
  return WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_RETURN_IF_ERROR(CheckRunExists(c, run_id));
    // Finishing twice keeps the first finish time.
    FT_DB_ASSIGN_OR_RETURN(Statement s, c.Prepare("UPDATE runs SET finished_unix_ms = ?2 "
                                                  "WHERE run_id = ?1 AND finished_unix_ms = 0"));
    s.Bind(1, run_id).Bind(2, NowUnixMs());
    return s.Run();
  });
}

absl::StatusOr<RunInfo> SqlStore::GetRun(int64_t run_id) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  absl::MutexLock lock(&mu_);
  FT_DB_ASSIGN_OR_RETURN(Statement s, conn_->Prepare(absl::StrCat(
                                          "SELECT ", kRunColumns, " FROM runs WHERE run_id = ?1")));
  s.Bind(1, run_id);
  FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
  return ReadRun(s);
}

absl::StatusOr<RunInfo> SqlStore::FindUnfinishedRun(std::string_view commit,
                                                 std::string_view device_class,
                                                 std::string_view label) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(device_class, "device_class"));
  absl::MutexLock lock(&mu_);
  FT_DB_ASSIGN_OR_RETURN(
      Statement s, conn_->Prepare(absl::StrCat(
                       "SELECT ", kRunColumns,
                       " FROM runs WHERE commit_hash = ?1 AND device_class = ?2 AND label = ?3 "
                       "AND finished_unix_ms = 0 ORDER BY run_id DESC LIMIT 1")));
  s.BindAll(commit, device_class, label);
  FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) {
    return absl::NotFoundError(absl::StrCat("no unfinished run for commit '", std::string(commit),
                                            "', device class '", std::string(device_class),
                                            "', label '", std::string(label), "'"));
  }
  return ReadRun(s);
}

// ---- commits

absl::StatusOr<std::vector<std::string>> SqlStore::CommitsStartingWith(std::string_view prefix, int limit) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(prefix, "commit prefix"));
  FT_DB_RETURN_IF_ERROR(db_internal::RequireLimit(limit));
  std::string stored;
  for (const db_internal::CommitColumn& col : db_internal::CommitColumns()) {
    absl::StrAppend(&stored, stored.empty() ? "" : " UNION ", "SELECT ", col.column, " AS commit_hash FROM ", col.table);
  }
  absl::MutexLock lock(&mu_);
  FT_DB_ASSIGN_OR_RETURN(Statement s, conn_->Prepare(absl::StrCat(
                                          "SELECT commit_hash FROM (", stored,
                                          ") AS stored WHERE substr(commit_hash, 1, length(?1)) = ?1 "
                                          "ORDER BY commit_hash LIMIT ?2")));
  s.Bind(1, prefix).Bind(2, limit);
  return db_internal::ReadRows<std::string>(s, [](const Statement& row) { return row.Text(0); });
}

}  // namespace fusetune::db_internal

