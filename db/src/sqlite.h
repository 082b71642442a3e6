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

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fusetune::db_internal {

// Maps an SQLite result code to a Status carrying SQLite's message and `what` (the action):
// BUSY/LOCKED -> Unavailable (another process held the lock past the busy timeout),
// FULL -> ResourceExhausted, CONSTRAINT -> FailedPrecondition, CORRUPT/NOTADB -> DataLoss,
// CANTOPEN/PERM/READONLY -> PermissionDenied or Unavailable, anything else -> Internal.
absl::Status SqliteError(sqlite3* db, int rc, std::string_view what);

class Statement {
 public:
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
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

  // true: a row is available; false: done. An error also reports any failed Bind().
  absl::StatusOr<bool> Step();
  // Steps to completion, ignoring rows.
  absl::Status Run();

  bool IsNull(int col) const;
  int64_t Int64(int col) const;
  double Double(int col) const;
  std::string Text(int col) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_;
  int bind_rc_ = SQLITE_OK;
};

class Connection {
 public:
  // Opens (creating) `path`; sets the busy timeout before anything else touches the file.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const std::string& path,
                                                          int busy_timeout_ms);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs one or more statements with no parameters and no results of interest.
  absl::Status Exec(std::string_view sql);
  // Runs a single-value query (e.g. a PRAGMA) and returns its first column as text.
  absl::StatusOr<std::string> QueryText(std::string_view sql);
  // A cached prepared statement for `sql`.
  absl::StatusOr<Statement> Prepare(const std::string& sql);

  int64_t Changes() const { return sqlite3_changes64(db_); }
  int64_t LastInsertRowId() const { return sqlite3_last_insert_rowid(db_); }
  bool InTransaction() const { return sqlite3_get_autocommit(db_) == 0; }
  sqlite3* raw() const { return db_; }

 private:
  explicit Connection(sqlite3* db) : db_(db) {}
  sqlite3* db_;
  std::unordered_map<std::string, sqlite3_stmt*> cache_;
};

}  // namespace fusetune::db_internal

#endif  // FUSETUNE_DB_SRC_SQLITE_H_
