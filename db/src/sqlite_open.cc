#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fusetune/db/store.h"
#include "schema.h"
#include "sql_store.h"
#include "sqlite.h"
#include "status_macros.h"
#include "store_open.h"

// Opening a Store over an SQLite file: WAL, the read-only cases (db/README.md, "Reading a
// shared database"), refusing another program's file, then the SqlStore's migrations.

namespace fusetune::db_internal {

namespace {

// Switching a file to WAL needs an exclusive lock, and SQLite returns SQLITE_BUSY for it
// without calling the busy handler (seen when several processes create one file at once),
// so this retries with backoff up to the busy timeout. A file already in WAL mode answers
// at once: the mode is persistent.
absl::StatusOr<std::string> SwitchToWal(SqliteConnection& c, int busy_timeout_ms) {
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

absl::StatusOr<FileSchema> ReadFileSchema(SqliteConnection& c) {
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
absl::StatusOr<std::unique_ptr<SqliteConnection>> OpenForReading(const std::string& path, int busy_timeout_ms) {
  std::error_code ec;
  if (path != ":memory:" && !std::filesystem::exists(path, ec) && !ec) {
    return absl::NotFoundError(absl::StrCat("no database at ", path));
  }
  FT_DB_ASSIGN_OR_RETURN(std::unique_ptr<SqliteConnection> conn,
                         SqliteConnection::Open(path, busy_timeout_ms, db_internal::OpenMode::kReadOnly));
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
    FT_DB_ASSIGN_OR_RETURN(conn, SqliteConnection::Open(path, busy_timeout_ms, db_internal::OpenMode::kImmutable));
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

absl::StatusOr<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path, const StoreOptions& options) {
  if (path.empty()) return absl::InvalidArgumentError("database path must not be empty");
  if (options.busy_timeout_ms < 0)
    return absl::InvalidArgumentError("busy_timeout_ms must be >= 0");
  if (options.access == StoreAccess::kReadOnly) {
    FT_DB_ASSIGN_OR_RETURN(std::unique_ptr<SqliteConnection> conn, OpenForReading(path, options.busy_timeout_ms));
    return std::unique_ptr<Store>(SqlStore::Create(std::move(conn), StoreAccess::kReadOnly));
  }
  FT_DB_ASSIGN_OR_RETURN(std::unique_ptr<SqliteConnection> conn,
                         SqliteConnection::Open(path, options.busy_timeout_ms));

  // Refuse a newer schema, or another program's database, before changing anything (not
  // even the journal mode).
  FT_DB_ASSIGN_OR_RETURN(FileSchema schema, ReadFileSchema(*conn));
  const int latest = Store::LatestSchemaVersion();
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

  std::unique_ptr<SqlStore> store = SqlStore::Create(std::move(conn), StoreAccess::kReadWrite);
  FT_DB_RETURN_IF_ERROR(store->Migrate());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace fusetune::db_internal
