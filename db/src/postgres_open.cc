#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fusetune/db/store.h"
#include "postgres.h"
#include "schema.h"
#include "sql_store.h"
#include "status_macros.h"
#include "store_open.h"

// Opening a Store over a PostgreSQL database: connect, then migrate (read-write) or check
// that the schema is exactly this binary's (read-only), as an SQLite file is.

namespace fusetune::db_internal {

absl::StatusOr<std::unique_ptr<Store>> OpenPostgresStore(const std::string& url, const StoreOptions& options) {
  if (options.busy_timeout_ms < 0) return absl::InvalidArgumentError("busy_timeout_ms must be >= 0");
  FT_DB_ASSIGN_OR_RETURN(std::unique_ptr<PostgresConnection> conn,
                         PostgresConnection::Open(url, options.busy_timeout_ms));
  const std::string name = conn->path();
  if (options.access == StoreAccess::kReadOnly) {
    FT_DB_ASSIGN_OR_RETURN(const int version, conn->ReadSchemaVersion());
    const int latest = Store::LatestSchemaVersion();
    if (version > latest) return SchemaNewerThanBinary(name, version, latest);
    if (version == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "database ", name, " has no fusetune schema; a writing command (e.g. fusetune sweep) creates it"));
    }
    if (version < latest) {
      return absl::FailedPreconditionError(absl::StrCat(
          "database ", name, " has schema version ", version, ", older than this binary's ", latest,
          "; a writing command (e.g. fusetune sweep) upgrades it, reading commands never change the database"));
    }
    // The server refuses any write on this connection, whatever the role may do.
    FT_DB_RETURN_IF_ERROR(conn->SetForConnection("SET default_transaction_read_only = on"));
    return std::unique_ptr<Store>(SqlStore::Create(std::move(conn), StoreAccess::kReadOnly));
  }
  // kProcessCrash: a commit returns before its WAL record is flushed; a server crash may lose
  // the last commits (never corrupts), a crash of this process loses nothing committed.
  if (options.durability == Durability::kProcessCrash) {
    FT_DB_RETURN_IF_ERROR(conn->SetForConnection("SET synchronous_commit = off"));
  }
  std::unique_ptr<SqlStore> store = SqlStore::Create(std::move(conn), StoreAccess::kReadWrite);
  FT_DB_RETURN_IF_ERROR(store->Migrate());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace fusetune::db_internal
