// The PostgreSQL Connection (sql.h) over libpq (internal to db/).
//
// PostgresConnection owns one PGconn. Its statements send their parameters as text with
// explicit types (int8, float8, text; NULL untyped) through PQexecParams and read the
// results as text, so the Store's SQL (parameters ?1, ?2, ..., rewritten to $1, $2, ...)
// runs unchanged. Messages name the database by its URL without the password
// (RedactDatabaseUrl).
//
// Thread-safety: none. The Store serialises every use of a Connection with its mutex.
#ifndef FUSETUNE_DB_SRC_POSTGRES_H_
#define FUSETUNE_DB_SRC_POSTGRES_H_

#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <functional>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sql.h"

namespace fusetune::db_internal {

// The one mapping from a PostgreSQL error (its SQLSTATE, e.g. "28P01") to a Status. The
// message names the database (`name`: the redacted URL), says what is wrong and what to do,
// and ends with the server's own text; it never carries SQL or a password.
// 08 (connection) and 57P (shutdown) -> Unavailable, 28 (authentication) and 42501
// (privilege) and 25006 (read-only transaction) -> PermissionDenied, 23 (constraint) ->
// FailedPrecondition, 22 (data) -> InvalidArgument, 40001/40P01/55P03 (serialization,
// deadlock, lock timeout) -> Unavailable, 53 (resources) -> ResourceExhausted, XX001/XX002
// (corruption) -> DataLoss, anything else -> Internal.
absl::Status PostgresError(std::string_view sqlstate, std::string_view server_message, std::string_view name);

// `text` as PostgreSQL's text can hold it: valid UTF-8 without NUL. Each NUL byte and each
// byte that does not begin a valid UTF-8 sequence becomes U+FFFD; valid text is unchanged.
// (A trial's message from a failed launch may carry any bytes; refusing it would refuse the
// trial, and SQLite stores it exactly.)
std::string ToPostgresText(std::string_view text);

// Rewrites the parameters ?1, ?2, ... of `sql` as $1, $2, ... (outside quoted text).
std::string ToPostgresParameters(std::string_view sql);

class PostgresConnection final : public Connection {
 public:
  // Connects to `url` (a postgresql:// URL; libpq reads PGPASSFILE, PGSSLMODE and the other
  // PG* variables itself). `lock_timeout_ms` bounds how long a statement waits for another
  // transaction's row or table lock (then Unavailable). A refused or unreachable server is
  // Unavailable, a refused login PermissionDenied; the message never holds the password.
  static absl::StatusOr<std::unique_ptr<PostgresConnection>> Open(const std::string& url, int lock_timeout_ms);
  ~PostgresConnection() override;
  PostgresConnection(const PostgresConnection&) = delete;
  PostgresConnection& operator=(const PostgresConnection&) = delete;

  SqlDialect dialect() const override { return SqlDialect::kPostgres; }
  const std::string& path() const override { return name_; }
  absl::Status Exec(std::string_view sql) override;
  absl::StatusOr<std::string> QueryText(std::string_view sql) override;
  absl::StatusOr<Statement> Prepare(const std::string& sql) override;
  int64_t Changes() const override { return changes_; }
  absl::StatusOr<int64_t> LastInsertRowId() override;
  bool InTransaction() const override;
  absl::Status BeginWrite() override { return Begin("BEGIN"); }
  absl::Status BeginRead() override { return Begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); }
  absl::StatusOr<int> ReadSchemaVersion() override;
  absl::Status WriteSchemaVersion(int version) override;
  absl::Status LockSchema() override;

  // Runs `sql` and remembers it as a setting of the connection (SET ...), so that a reconnect
  // applies it again.
  absl::Status SetForConnection(std::string_view sql);
  // Sends one command through `send` (a PQexec or PQexecParams on raw()). When it fails
  // because the connection was lost while no transaction was open (the server restarted, an
  // idle connection was cut), nothing of the caller's was under way: the connection is reset
  // once, its connection settings applied again, and the command sent again. Inside a
  // transaction a lost connection is the caller's error (Unavailable): its work is gone.
  PGresult* Execute(const std::function<PGresult*()>& send);

  // Starts a transaction with `sql`. A connection lost inside an earlier transaction stays
  // broken (libpq no longer knows its transaction state, so Execute does not reset it); the
  // start of a new transaction is a point where nothing of the caller's is under way, so a
  // broken connection is reset here first.
  absl::Status Begin(std::string_view sql);
  // Resets a lost connection and applies its settings again; false when still away.
  bool Reconnect();

  // The status of a failed `result` (or, when null, of the connection).
  absl::Status Error(const PGresult* result) const;
  // Called by a statement after it ran a command: remembers its row count for Changes().
  void NoteChanges(const PGresult* result);
  PGconn* raw() const { return conn_; }

 private:
  PostgresConnection(PGconn* conn, std::string name) : conn_(conn), name_(std::move(name)) {}
  PGconn* conn_;
  std::string name_;
  int64_t changes_ = 0;
  bool in_transaction_ = false;  // a BEGIN succeeded and no COMMIT or ROLLBACK was sent since
  std::vector<std::string> connection_settings_;  // SetForConnection's, in order
  std::unordered_map<std::string, std::string> rewritten_;  // Store SQL -> $N form
};

}  // namespace fusetune::db_internal

#endif  // FUSETUNE_DB_SRC_POSTGRES_H_
