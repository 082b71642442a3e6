#include "fusetune/db/store.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "fusetune/base/time.h"
#include "fusetune/records/json.h"
#include "nlohmann/json.hpp"
#include "schema.h"
#include "sqlite.h"
#include "sqlite_rows.h"
#include "sqlite_store.h"

// The SQLite Store: Open, the schema, transactions, runs and commits. The other tables'
// methods are in sqlite_trials.cc, sqlite_results.cc, sqlite_bench.cc,
// sqlite_change_points.cc and sqlite_jobs.cc.

namespace fusetune::db_internal {

absl::Status CheckRunExists(Connection& c, int64_t run_id) {
  FT_DB_ASSIGN_OR_RETURN(Statement s, c.Prepare("SELECT 1 FROM runs WHERE run_id = ?1"));
  s.Bind(1, run_id);
  FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
  return absl::OkStatus();
}

absl::Status SqliteStore::WriteTransaction(const std::function<absl::Status(Connection&)>& body) {
  if (access_ == StoreAccess::kReadOnly) {
    return absl::PermissionDeniedError(absl::StrCat(
        "database ", conn_->path(), " was opened read-only; writing needs a Store opened with StoreAccess::kReadWrite"));
  }
  FT_DB_RETURN_IF_ERROR(conn_->Exec("BEGIN IMMEDIATE"));
  absl::Status st = body(*conn_);
  if (st.ok()) st = conn_->Exec("COMMIT");
  if (!st.ok() && conn_->InTransaction()) {
    (void)conn_->Exec("ROLLBACK");  // the body's error is the one worth reporting
  }
  return st;
}

absl::Status SqliteStore::ReadTransaction(const std::function<absl::Status(Connection&)>& body) {
  FT_DB_RETURN_IF_ERROR(conn_->Exec("BEGIN DEFERRED"));
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

namespace {

// Switching a file to WAL needs an exclusive lock, and SQLite returns SQLITE_BUSY for it
// without calling the busy handler (seen when several processes create one file at once),
// so this retries with backoff up to the busy timeout. A file already in WAL mode answers
// at once: the mode is persistent.
absl::StatusOr<std::string> SwitchToWal(Connection& c, int busy_timeout_ms) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(busy_timeout_ms);
  int sleep_ms = 1;
  while (true) {
    absl::StatusOr<std::string> mode = c.QueryText("PRAGMA journal_mode=WAL");
    if (mode.ok() || !absl::IsUnavailable(mode.status()) ||
        std::chrono::steady_clock::now() >= deadline) {
      return mode;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    sleep_ms = std::min(sleep_ms * 2, 50);
  }
}

}  // namespace

// ---- open / schema

namespace {

// What a file holds before Open touches it: its schema version and whether it has any
// table at all (a file at version 0 with tables belongs to something else).
struct FileSchema {
  int version = 0;
  bool has_tables = false;
};

absl::StatusOr<FileSchema> ReadFileSchema(Connection& c) {
  // One statement, so both come from one snapshot: read apart, a concurrent creator's
  // migration could commit in between (version 0, then tables) and look like a foreign file.
  FT_DB_ASSIGN_OR_RETURN(std::string text,
                         c.QueryText("SELECT (SELECT user_version FROM pragma_user_version) || ' ' || "
                                     "(SELECT COUNT(*) FROM sqlite_master)"));
  FileSchema schema;
  int tables = 0;
  if (std::sscanf(text.c_str(), "%d %d", &schema.version, &tables) != 2) {
    return absl::InternalError(absl::StrCat("unexpected schema probe result '", text, "'"));
  }
  schema.has_tables = tables > 0;
  return schema;
}

absl::Status ForeignDatabase(const std::string& path) {
  return absl::FailedPreconditionError(absl::StrCat(
      path, " is not a fusetune database (an SQLite file with other tables and no fusetune schema version); check "
            "the database path"));
}

// A reader in a directory it cannot write: SQLite needs <db>-shm (the WAL index) to read
// <db>-wal, and cannot create it. Only pending WAL content makes that a real problem.
absl::Status PendingWalUnreadable(const std::string& path) {
  return absl::FailedPreconditionError(absl::StrCat(
      "database ", path, " has changes in ", path, "-wal that are not yet in the file, and this process cannot ",
      "create ", path, "-shm to read them (the directory is read-only for it); ask the owner to fold them in with ",
      "sqlite3 ", path, " 'PRAGMA wal_checkpoint(TRUNCATE)' (or to stop the process writing it), or copy ", path,
      " and ", path, "-wal to a writable directory and read the copy"));
}

// Opens an existing file for reading only: never creates, migrates or changes it.
absl::StatusOr<std::unique_ptr<Connection>> OpenForReading(const std::string& path, int busy_timeout_ms) {
  std::error_code ec;
  if (path != ":memory:" && !std::filesystem::exists(path, ec) && !ec) {
    return absl::NotFoundError(absl::StrCat("no database at ", path));
  }
  FT_DB_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                         Connection::Open(path, busy_timeout_ms, db_internal::OpenMode::kReadOnly));
  absl::StatusOr<FileSchema> schema = ReadFileSchema(*conn);
  const int rc = conn->ErrorCode() & 0xff;
  if (!schema.ok() && path != ":memory:" && (rc == SQLITE_CANTOPEN || rc == SQLITE_READONLY)) {
    // Where <db>-shm cannot be created, a file with no pending WAL content can be read as it
    // is (immutable: no locks, no -shm). With pending content that would silently miss
    // committed data, so that is refused instead.
    std::error_code size_ec;
    const uintmax_t wal_bytes = std::filesystem::file_size(path + "-wal", size_ec);
    if (!size_ec && wal_bytes > 0) return PendingWalUnreadable(path);
    conn.reset();
    FT_DB_ASSIGN_OR_RETURN(conn, Connection::Open(path, busy_timeout_ms, db_internal::OpenMode::kImmutable));
    schema = ReadFileSchema(*conn);
  }
  if (!schema.ok()) return schema.status();
  const int latest = Store::LatestSchemaVersion();
  if (schema->version > latest) return db_internal::SchemaNewerThanBinary(path, schema->version, latest);
  if (schema->version == 0) {
    if (schema->has_tables) return ForeignDatabase(path);
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not a fusetune database (it has no tables); check the database path"));
  }
  if (schema->version < latest) {
    return absl::FailedPreconditionError(
        absl::StrCat("database ", path, " has schema version ", schema->version, ", older than this binary's ",
                     latest, "; a writing command (e.g. fusetune sweep) upgrades it, reading commands never change "
                     "the file"));
  }
  return conn;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> SqliteStore::Open(const std::string& path, const StoreOptions& options) {
  if (path.empty()) return absl::InvalidArgumentError("database path must not be empty");
  if (options.busy_timeout_ms < 0)
    return absl::InvalidArgumentError("busy_timeout_ms must be >= 0");
  if (options.access == StoreAccess::kReadOnly) {
    FT_DB_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, OpenForReading(path, options.busy_timeout_ms));
    return std::unique_ptr<Store>(new SqliteStore(std::move(conn), StoreAccess::kReadOnly));
  }
  FT_DB_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                         Connection::Open(path, options.busy_timeout_ms));

  // Refuse a newer schema, or another program's database, before changing anything (not
  // even the journal mode).
  FT_DB_ASSIGN_OR_RETURN(FileSchema schema, ReadFileSchema(*conn));
  const int latest = LatestSchemaVersion();
  if (schema.version > latest) return db_internal::SchemaNewerThanBinary(path, schema.version, latest);
  if (schema.version == 0 && schema.has_tables) return ForeignDatabase(path);

  // WAL: readers never block the writer and a commit is one append to the -wal file.
  FT_DB_ASSIGN_OR_RETURN(std::string mode, SwitchToWal(*conn, options.busy_timeout_ms));
  if (mode != "wal" && mode != "memory") {
    return absl::FailedPreconditionError(
        absl::StrCat("could not switch database ", path, " to WAL mode (journal_mode=", mode, ")"));
  }
  FT_DB_RETURN_IF_ERROR(conn->Exec("PRAGMA foreign_keys=ON"));
  FT_DB_RETURN_IF_ERROR(conn->Exec(options.durability == Durability::kPowerLoss
                                       ? "PRAGMA synchronous=FULL"
                                       : "PRAGMA synchronous=NORMAL"));

  std::unique_ptr<SqliteStore> store(new SqliteStore(std::move(conn), StoreAccess::kReadWrite));
  {
    absl::MutexLock lock(&store->mu_);
    // Read the version again under the write lock: another process may have migrated (or
    // upgraded the file) between our first look and now.
    absl::Status st = store->WriteTransaction([&](Connection& c) {
      return db_internal::ApplyMigrations(c, db_internal::Migrations(), path);
    });
    if (!st.ok()) return st;
  }
  return std::unique_ptr<Store>(std::move(store));
}

absl::StatusOr<int> SqliteStore::SchemaVersion() {
  absl::MutexLock lock(&mu_);
  FT_DB_ASSIGN_OR_RETURN(std::string text, conn_->QueryText("PRAGMA user_version"));
  return std::atoi(text.c_str());
}

// ---- runs

absl::StatusOr<int64_t> SqliteStore::BeginRun(const RunInfo& info) {
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
    run_id = c.LastInsertRowId();
    return absl::OkStatus();
  }));
  return run_id;
}

absl::Status SqliteStore::FinishRun(int64_t run_id) {
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

absl::StatusOr<RunInfo> SqliteStore::GetRun(int64_t run_id) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  absl::MutexLock lock(&mu_);
  FT_DB_ASSIGN_OR_RETURN(Statement s, conn_->Prepare(absl::StrCat(
                                          "SELECT ", kRunColumns, " FROM runs WHERE run_id = ?1")));
  s.Bind(1, run_id);
  FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
  return ReadRun(s);
}

absl::StatusOr<RunInfo> SqliteStore::FindUnfinishedRun(std::string_view commit,
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

absl::StatusOr<std::vector<std::string>> SqliteStore::CommitsStartingWith(std::string_view prefix, int limit) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(prefix, "commit prefix"));
  FT_DB_RETURN_IF_ERROR(db_internal::RequireLimit(limit));
  std::string stored;
  for (const db_internal::CommitColumn& col : db_internal::CommitColumns()) {
    absl::StrAppend(&stored, stored.empty() ? "" : " UNION ", "SELECT ", col.column, " AS commit_hash FROM ", col.table);
  }
  absl::MutexLock lock(&mu_);
  FT_DB_ASSIGN_OR_RETURN(Statement s, conn_->Prepare(absl::StrCat(
                                          "SELECT commit_hash FROM (", stored,
                                          ") WHERE substr(commit_hash, 1, length(?1)) = ?1 "
                                          "ORDER BY commit_hash LIMIT ?2")));
  s.Bind(1, prefix).Bind(2, limit);
  return db_internal::ReadRows<std::string>(s, [](const Statement& row) { return row.Text(0); });
}

}  // namespace fusetune::db_internal

namespace fusetune {

int Store::LatestSchemaVersion() { return db_internal::Migrations().back().version; }

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) { return Open(path, StoreOptions{}); }

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path, const StoreOptions& options) {
  return db_internal::SqliteStore::Open(path, options);
}

}  // namespace fusetune
