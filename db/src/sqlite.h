// Thin RAII wrappers over the SQLite C API used by the store (internal to db/).
//
// Connection owns one sqlite3 handle and a cache of prepared statements keyed by their SQL
// text, so each statement is compiled once per connection. Statement is a borrowed, cached
// statement that is reset (and its bindings cleared) when it goes out of scope.
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

namespace fusetune::db_internal {

// The one mapping from an SQLite result code to a Status. The message names the database
// file (`path`), says what is wrong and what to do, and ends with SQLite's own text and
// code; it never carries SQL. BUSY/LOCKED -> Unavailable (locked past the busy timeout),
// CANTOPEN -> Unavailable, FULL -> ResourceExhausted, CONSTRAINT -> FailedPrecondition,
// CORRUPT/NOTADB -> DataLoss, READONLY/PERM/AUTH -> PermissionDenied, TOOBIG/RANGE/MISMATCH
// -> InvalidArgument, anything else (IOERR included) -> Internal.
absl::Status SqliteError(int rc, std::string_view sqlite_message, std::string_view path);

class Connection;

class Statement {
 public:
  Statement(const Connection* conn, sqlite3_stmt* stmt) : conn_(conn), stmt_(stmt) {}
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&&) = delete;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  // Parameters are 1-based as in SQLite. A NaN double is stored as NULL (SQLite's own rule),
  // and Double() reads NULL back as NaN so that "verification produced NaN" survives.
  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, int value) { return Bind(index, static_cast<int64_t>(value)); }
  Statement& Bind(int index, double value);
  Statement& Bind(int index, std::string_view value);
  Statement& Bind(int index, const char* value) { return Bind(index, std::string_view(value)); }
  Statement& BindNull(int index);
  // Binds NULL when value == 0 (used for optional foreign keys such as a job's run).
  Statement& BindIdOrNull(int index, int64_t value);
  // An optional foreign key for BindAll: bound as BindIdOrNull.
  struct IdOrNull {
    int64_t id;
  };
  Statement& Bind(int index, IdOrNull value) { return BindIdOrNull(index, value.id); }
  // Binds `values` to parameters 1, 2, ... in order: one call for all of a row's columns,
  // so that each table's column order is written once (its INSERT lists it).
  template <typename... Values>
  Statement& BindAll(const Values&... values) {
    int index = 0;
    (Bind(++index, values), ...);
    return *this;
  }

  // true: a row is available; false: done. An error also reports any failed Bind().
  absl::StatusOr<bool> Step();
  // Steps to completion, ignoring rows.
  absl::Status Run();

  bool IsNull(int col) const;
  int64_t Int64(int col) const;
  double Double(int col) const;
  std::string Text(int col) const;
  // Reads columns `first`, `first` + 1, ... into `fields`, each by its type: std::string
  // (Text), int64_t (Int64), int (Int64 narrowed), double (Double). The row readers' one
  // way to read consecutive plain columns.
  template <typename... Fields>
  void ReadColumns(int first, Fields*... fields) const {
    int col = first;
    (ReadColumn(col++, fields), ...);
  }

 private:
  void ReadColumn(int col, std::string* out) const { *out = Text(col); }
  void ReadColumn(int col, int64_t* out) const { *out = Int64(col); }
  void ReadColumn(int col, int* out) const { *out = static_cast<int>(Int64(col)); }
  void ReadColumn(int col, double* out) const { *out = Double(col); }

  const Connection* conn_;
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

class Connection {
 public:
  // Opens `path` (a file name, or ":memory:"); sets the busy timeout before anything else
  // touches the file. Errors name `path`.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const std::string& path,
                                                          int busy_timeout_ms,
                                                          OpenMode mode = OpenMode::kReadWriteCreate);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs one or more statements with no parameters and no results of interest.
  absl::Status Exec(std::string_view sql);
  // Runs a single-value query (e.g. a PRAGMA) and returns its first column as text.
  absl::StatusOr<std::string> QueryText(std::string_view sql);
  // A cached prepared statement for `sql`.
  absl::StatusOr<Statement> Prepare(const std::string& sql);

  // SqliteError for `rc` with this connection's message and path.
  absl::Status Error(int rc) const;
  // The extended result code of the last failed call (SQLITE_OK if none).
  int ErrorCode() const { return sqlite3_extended_errcode(db_); }

  int64_t Changes() const { return sqlite3_changes64(db_); }
  int64_t LastInsertRowId() const { return sqlite3_last_insert_rowid(db_); }
  bool InTransaction() const { return sqlite3_get_autocommit(db_) == 0; }
  sqlite3* raw() const { return db_; }
  const std::string& path() const { return path_; }

 private:
  Connection(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_;
  std::string path_;
  std::unordered_map<std::string, sqlite3_stmt*> cache_;
};

}  // namespace fusetune::db_internal

#endif  // FUSETUNE_DB_SRC_SQLITE_H_
