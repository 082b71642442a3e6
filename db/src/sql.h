// The SQL connection the Store's methods are written against, whatever the database: SQLite
// (sqlite.h) or PostgreSQL (postgres.h). Internal to db/.
//
// The Store's SQL is written once, in the subset both dialects accept: parameters are ?1,
// ?2, ... (the PostgreSQL connection rewrites them to $1, $2, ...); upserts use ON CONFLICT;
// no dialect-only functions. What cannot be said in that subset is asked of the Connection
// (transactions, the schema version, row locks, the last inserted id).
//
// Thread-safety: none. The Store serialises every use of a Connection with its mutex.
#ifndef FUSETUNE_DB_SRC_SQL_H_
#define FUSETUNE_DB_SRC_SQL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fusetune::db_internal {

enum class SqlDialect { kSqlite, kPostgres };

// One prepared statement of a connection: what Statement forwards to.
class StatementImpl {
 public:
  virtual ~StatementImpl() = default;
  virtual void BindInt64(int index, int64_t value) = 0;
  virtual void BindDouble(int index, double value) = 0;  // never NaN (Statement binds NULL)
  virtual void BindText(int index, std::string_view value) = 0;
  virtual void BindNull(int index) = 0;
  // true: a row is available; false: done. The first call runs the statement.
  virtual absl::StatusOr<bool> Step() = 0;
  virtual bool IsNull(int col) const = 0;
  virtual int64_t Int64(int col) const = 0;
  virtual double Double(int col) const = 0;  // a non-NULL column
  virtual std::string Text(int col) const = 0;
};

// A statement ready to bind and step; it releases what it holds when it goes out of scope.
class Statement {
 public:
  explicit Statement(std::unique_ptr<StatementImpl> impl) : impl_(std::move(impl)) {}

  // Parameters are 1-based. A NaN double is stored as NULL (SQLite's own rule, kept for
  // PostgreSQL so that both stores read back the same), and Double() reads NULL back as NaN
  // so that "verification produced NaN" survives.
  Statement& Bind(int index, int64_t value) {
    impl_->BindInt64(index, value);
    return *this;
  }
  Statement& Bind(int index, int value) { return Bind(index, static_cast<int64_t>(value)); }
  Statement& Bind(int index, double value);
  Statement& Bind(int index, std::string_view value) {
    impl_->BindText(index, value);
    return *this;
  }
  Statement& Bind(int index, const char* value) { return Bind(index, std::string_view(value)); }
  Statement& BindNull(int index) {
    impl_->BindNull(index);
    return *this;
  }
  // Binds NULL when value == 0 (used for optional foreign keys such as a job's run).
  Statement& BindIdOrNull(int index, int64_t value) { return value == 0 ? BindNull(index) : Bind(index, value); }
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
  absl::StatusOr<bool> Step() { return impl_->Step(); }
  // Steps to completion, ignoring rows.
  absl::Status Run();

  bool IsNull(int col) const { return impl_->IsNull(col); }
  int64_t Int64(int col) const { return impl_->Int64(col); }
  double Double(int col) const;
  std::string Text(int col) const { return impl_->Text(col); }
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

  std::unique_ptr<StatementImpl> impl_;
};

// One open database connection.
class Connection {
 public:
  virtual ~Connection() = default;

  virtual SqlDialect dialect() const = 0;
  // What messages call the database: the file name, or the URL without its password.
  virtual const std::string& path() const = 0;

  // Runs one or more statements with no parameters and no results of interest.
  virtual absl::Status Exec(std::string_view sql) = 0;
  // Runs a single-value query and returns its first column as text ("" when no row).
  virtual absl::StatusOr<std::string> QueryText(std::string_view sql) = 0;
  // A statement for `sql` (parameters ?1, ?2, ...).
  virtual absl::StatusOr<Statement> Prepare(const std::string& sql) = 0;

  // Rows changed by the last INSERT, UPDATE or DELETE.
  virtual int64_t Changes() const = 0;
  // The id the last INSERT gave its row (a table whose key the database assigns).
  virtual absl::StatusOr<int64_t> LastInsertRowId() = 0;
  virtual bool InTransaction() const = 0;

  // Starts the transaction of a Store write: SQLite takes the write lock up front (BEGIN
  // IMMEDIATE), so two processes never deadlock by upgrading read transactions; PostgreSQL
  // begins a READ COMMITTED transaction whose read-modify-write steps lock their rows
  // (ForUpdate()).
  virtual absl::Status BeginWrite() = 0;
  // Starts a read transaction: its SELECTs see one consistent snapshot.
  virtual absl::Status BeginRead() = 0;

  // The schema version the database holds (0: none), and setting it inside a migration's
  // write transaction. SQLite keeps it in PRAGMA user_version, PostgreSQL in the one-row
  // table fusetune_schema.
  virtual absl::StatusOr<int> ReadSchemaVersion() = 0;
  virtual absl::Status WriteSchemaVersion(int version) = 0;
  // Inside a write transaction, before the version is read: makes concurrent openers migrate
  // one after the other. SQLite's BEGIN IMMEDIATE already did; PostgreSQL takes a
  // transaction-scoped advisory lock.
  virtual absl::Status LockSchema() { return absl::OkStatus(); }

  // An SQL expression for the database's clock in Unix milliseconds (JobStore's
  // kDatabaseClock): PostgreSQL's clock_timestamp(), SQLite's 'now' (this host's clock).
  const char* NowMillisSql() const {
    return dialect() == SqlDialect::kPostgres ? "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
                                              : "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";
  }
  // Appended to a SELECT that reads a row the transaction then changes: " FOR UPDATE" on
  // PostgreSQL (concurrent writers wait for the row), nothing on SQLite (the write lock is
  // already exclusive).
  const char* ForUpdate() const { return dialect() == SqlDialect::kPostgres ? " FOR UPDATE" : ""; }
  // Appended to the SELECT that picks a queued job to lease: " FOR UPDATE SKIP LOCKED" on
  // PostgreSQL, so two leasing servers pick different jobs instead of waiting on one.
  const char* ForUpdateSkipLocked() const {
    return dialect() == SqlDialect::kPostgres ? " FOR UPDATE SKIP LOCKED" : "";
  }
};

}  // namespace fusetune::db_internal

#endif  // FUSETUNE_DB_SRC_SQL_H_
