// The SQLite Connection (sql.h): thin RAII wrappers over the SQLite C API (internal to db/).
//
// SqliteConnection owns one sqlite3 handle and a cache of prepared statements keyed by their SQL
// text, so each statement is compiled once per connection. Statement is a borrowed, cached
// statement (SqliteStatement) that is reset (and its bindings cleared) when it goes out of scope.
//
// Thread-safety: none. The Store serialises every use of a Connection with its mutex.
#ifndef FUSETUNE_DB_SRC_SQLITE_H_
#define FUSETUNE_DB_SRC_SQLITE_H_

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sql.h"

namespace fusetune::db_internal {

// The one mapping from an SQLite result code to a Status. The message names the database
// file (`path`), says what is wrong and what to do, and ends with SQLite's own text and
// code; it never carries SQL. BUSY/LOCKED -> Unavailable (locked past the busy timeout),
// CANTOPEN -> Unavailable, FULL -> ResourceExhausted, CONSTRAINT -> FailedPrecondition,
// CORRUPT/NOTADB -> DataLoss, READONLY/PERM/AUTH -> PermissionDenied, TOOBIG/RANGE/MISMATCH
// -> InvalidArgument, anything else (IOERR included) -> Internal.
absl::Status SqliteError(int rc, std::string_view sqlite_message, std::string_view path);

class SqliteConnection;

// A statement of an SqliteConnection: a borrowed, cached sqlite3_stmt, reset (and its
// bindings cleared) when the Statement that owns this goes out of scope.
class SqliteStatement final : public StatementImpl {
 public:
  SqliteStatement(const SqliteConnection* conn, sqlite3_stmt* stmt) : conn_(conn), stmt_(stmt) {}
  ~SqliteStatement() override;
  void BindInt64(int index, int64_t value) override;
  void BindDouble(int index, double value) override;
  void BindText(int index, std::string_view value) override;
  void BindNull(int index) override;
  absl::StatusOr<bool> Step() override;
  bool IsNull(int col) const override;
  int64_t Int64(int col) const override;
  double Double(int col) const override;
  std::string Text(int col) const override;

 private:
  void Keep(int rc) {
    if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  }
  const SqliteConnection* conn_;
  sqlite3_stmt* stmt_;
  int bind_rc_ = SQLITE_OK;
};

// How a Connection opens its file.
enum class OpenMode {
  kReadWriteCreate,  // read and write; create the file if absent
  kReadOnly,         // read only; the file must exist. WAL mode still needs <path>-shm
                     // (created if absent, so the directory must be writable then)
  kImmutable,        // read only, and SQLite assumes nobody changes the file while it is
                     // open: no locks, no -wal/-shm. Only correct when no WAL content is
                     // pending and no writer is active (the caller checks the first).
};

class SqliteConnection final : public Connection {
 public:
  // Opens `path` (a file name, or ":memory:"); sets the busy timeout before anything else
  // touches the file. Errors name `path`.
  static absl::StatusOr<std::unique_ptr<SqliteConnection>> Open(const std::string& path,
                                                          int busy_timeout_ms,
                                                          OpenMode mode = OpenMode::kReadWriteCreate);
  ~SqliteConnection() override;
  SqliteConnection(const SqliteConnection&) = delete;
  SqliteConnection& operator=(const SqliteConnection&) = delete;

  SqlDialect dialect() const override { return SqlDialect::kSqlite; }

  // Runs one or more statements with no parameters and no results of interest.
  absl::Status Exec(std::string_view sql) override;
  // Runs a single-value query (e.g. a PRAGMA) and returns its first column as text.
  absl::StatusOr<std::string> QueryText(std::string_view sql) override;
  // A cached prepared statement for `sql`.
  absl::StatusOr<Statement> Prepare(const std::string& sql) override;

  // SqliteError for `rc` with this connection's message and path.
  absl::Status Error(int rc) const;
  // The extended result code of the last failed call (SQLITE_OK if none).
  int ErrorCode() const { return sqlite3_extended_errcode(db_); }

  int64_t Changes() const override { return sqlite3_changes64(db_); }
  absl::StatusOr<int64_t> LastInsertRowId() override { return sqlite3_last_insert_rowid(db_); }
  bool InTransaction() const override { return sqlite3_get_autocommit(db_) == 0; }
  absl::Status BeginWrite() override { return Exec("BEGIN IMMEDIATE"); }
  absl::Status BeginRead() override { return Exec("BEGIN DEFERRED"); }
  absl::StatusOr<int> ReadSchemaVersion() override;
  absl::Status WriteSchemaVersion(int version) override;
  sqlite3* raw() const { return db_; }
  const std::string& path() const override { return path_; }

 private:
  SqliteConnection(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_;
  std::string path_;
  std::unordered_map<std::string, sqlite3_stmt*> cache_;
};

}  // namespace fusetune::db_internal

#endif  // FUSETUNE_DB_SRC_SQLITE_H_
