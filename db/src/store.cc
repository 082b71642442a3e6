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
#include "store_internal.h"

// Open, the schema and runs; the shared checks and transactions of store_internal.h. The
// other tables' methods are in trials_store.cc, results_store.cc and jobs_store.cc.

namespace fusetune {

using db_internal::Connection;
using db_internal::Statement;

namespace db_internal {

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

absl::Status CheckRunExists(Connection& c, int64_t run_id) {
  FT_DB_ASSIGN_OR_RETURN(Statement s, c.Prepare("SELECT 1 FROM runs WHERE run_id = ?1"));
  s.Bind(1, run_id);
  FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
  return absl::OkStatus();
}

}  // namespace db_internal

using db_internal::CheckRunExists;
using db_internal::RequireNonEmpty;
using db_internal::RequirePositiveId;

absl::Status Store::Impl::WriteTransaction(const std::function<absl::Status(Connection&)>& body) {
  if (access == StoreAccess::kReadOnly) {
    return absl::PermissionDeniedError(absl::StrCat(
        "database ", conn->path(), " was opened read-only; writing needs a Store opened with StoreAccess::kReadWrite"));
  }
  FT_DB_RETURN_IF_ERROR(conn->Exec("BEGIN IMMEDIATE"));
  absl::Status st = body(*conn);
  if (st.ok()) st = conn->Exec("COMMIT");
  if (!st.ok() && conn->InTransaction()) {
    (void)conn->Exec("ROLLBACK");  // the body's error is the one worth reporting
  }
  return st;
}

absl::Status Store::Impl::ReadTransaction(const std::function<absl::Status(Connection&)>& body) {
  FT_DB_RETURN_IF_ERROR(conn->Exec("BEGIN DEFERRED"));
  absl::Status st = body(*conn);
  if (conn->InTransaction()) {
    absl::Status end = conn->Exec(st.ok() ? "COMMIT" : "ROLLBACK");
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

namespace db_internal {

const char kRunColumns[] =
    "run_id, commit_hash, host, device_json, tool_version, environment, label, "
    "started_unix_ms, finished_unix_ms";

absl::StatusOr<RunInfo> ReadRun(const Statement& s) {
  RunInfo r;
  r.run_id = s.Int64(0);
  r.commit = s.Text(1);
  r.host = s.Text(2);
  FT_DB_ASSIGN_OR_RETURN(r.device, DeviceFromJson(s.Text(3)));
  r.tool_version = s.Text(4);
  r.environment = s.Text(5);
  r.label = s.Text(6);
  r.started_unix_ms = s.Int64(7);
  r.finished_unix_ms = s.Int64(8);
  return r;
}

}  // namespace db_internal

using db_internal::kRunColumns;
using db_internal::ReadRun;

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

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

int Store::LatestSchemaVersion() { return db_internal::Migrations().back().version; }

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  return Open(path, StoreOptions{});
}

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

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path,
                                                   const StoreOptions& options) {
  if (path.empty()) return absl::InvalidArgumentError("database path must not be empty");
  if (options.busy_timeout_ms < 0)
    return absl::InvalidArgumentError("busy_timeout_ms must be >= 0");
  if (options.access == StoreAccess::kReadOnly) {
    FT_DB_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, OpenForReading(path, options.busy_timeout_ms));
    return std::unique_ptr<Store>(new Store(std::make_unique<Impl>(std::move(conn), StoreAccess::kReadOnly)));
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

  auto impl = std::make_unique<Impl>(std::move(conn), StoreAccess::kReadWrite);
  {
    absl::MutexLock lock(&impl->mu);
    // Read the version again under the write lock: another process may have migrated (or
    // upgraded the file) between our first look and now.
    absl::Status st = impl->WriteTransaction([&](Connection& c) {
      return db_internal::ApplyMigrations(c, db_internal::Migrations(), path);
    });
    if (!st.ok()) return st;
  }
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

absl::StatusOr<int> Store::SchemaVersion() {
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(std::string text, impl_->conn->QueryText("PRAGMA user_version"));
  return std::atoi(text.c_str());
}

// ---- runs

absl::StatusOr<int64_t> Store::BeginRun(const RunInfo& info) {
  if (info.started_unix_ms < 0 || info.finished_unix_ms < 0) {
    return absl::InvalidArgumentError("run timestamps must be >= 0");
  }
  absl::MutexLock lock(&impl_->mu);
  int64_t run_id = 0;
  FT_DB_RETURN_IF_ERROR(impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(
        Statement s,
        c.Prepare("INSERT INTO runs (commit_hash, host, device_class, device_json, backend, "
                  "tool_version, environment, label, started_unix_ms, finished_unix_ms) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"));
    s.Bind(1, info.commit)
        .Bind(2, info.host)
        .Bind(3, info.device.DeviceClass())
        .Bind(4, DeviceInfoToJson(info.device))
        .Bind(5, info.device.backend)
        .Bind(6, info.tool_version)
        .Bind(7, info.environment)
        .Bind(8, info.label)
        .Bind(9, info.started_unix_ms != 0 ? info.started_unix_ms : NowUnixMs())
        .Bind(10, info.finished_unix_ms);
    FT_DB_RETURN_IF_ERROR(s.Run());
    run_id = c.LastInsertRowId();
    return absl::OkStatus();
  }));
  return run_id;
}

absl::Status Store::FinishRun(int64_t run_id) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  absl::MutexLock lock(&impl_->mu);
  return impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_RETURN_IF_ERROR(CheckRunExists(c, run_id));
    // Finishing twice keeps the first finish time.
    FT_DB_ASSIGN_OR_RETURN(Statement s, c.Prepare("UPDATE runs SET finished_unix_ms = ?2 "
                                                  "WHERE run_id = ?1 AND finished_unix_ms = 0"));
    s.Bind(1, run_id).Bind(2, NowUnixMs());
    return s.Run();
  });
}

absl::StatusOr<RunInfo> Store::GetRun(int64_t run_id) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(absl::StrCat(
                                          "SELECT ", kRunColumns, " FROM runs WHERE run_id = ?1")));
  s.Bind(1, run_id);
  FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
  return ReadRun(s);
}

absl::StatusOr<RunInfo> Store::FindUnfinishedRun(std::string_view commit,
                                                 std::string_view device_class,
                                                 std::string_view label) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(device_class, "device_class"));
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(
      Statement s, impl_->conn->Prepare(absl::StrCat(
                       "SELECT ", kRunColumns,
                       " FROM runs WHERE commit_hash = ?1 AND device_class = ?2 AND label = ?3 "
                       "AND finished_unix_ms = 0 ORDER BY run_id DESC LIMIT 1")));
  s.Bind(1, commit).Bind(2, device_class).Bind(3, label);
  FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) {
    return absl::NotFoundError(absl::StrCat("no unfinished run for commit '", std::string(commit),
                                            "', device class '", std::string(device_class),
                                            "', label '", std::string(label), "'"));
  }
  return ReadRun(s);
}

// ---- commits

absl::StatusOr<std::vector<std::string>> Store::CommitsStartingWith(std::string_view prefix, int limit) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(prefix, "commit prefix"));
  FT_DB_RETURN_IF_ERROR(db_internal::RequireLimit(limit));
  std::string stored;
  for (const db_internal::CommitColumn& col : db_internal::CommitColumns()) {
    absl::StrAppend(&stored, stored.empty() ? "" : " UNION ", "SELECT ", col.column, " AS commit_hash FROM ", col.table);
  }
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(absl::StrCat(
                                          "SELECT commit_hash FROM (", stored,
                                          ") WHERE substr(commit_hash, 1, length(?1)) = ?1 "
                                          "ORDER BY commit_hash LIMIT ?2")));
  s.Bind(1, prefix).Bind(2, limit);
  return db_internal::ReadRows<std::string>(s, [](const Statement& row) { return row.Text(0); });
}

}  // namespace fusetune
