// The store's schema as an ordered list of forward-only migrations (internal to db/).
//
// Migration N takes a database at schema version N-1 to N. Migrations are append-only: a
// released migration is never edited, a schema change is a new entry at the end. Each one
// runs inside the same write transaction that sets the version (SQLite: PRAGMA
// user_version; PostgreSQL: the table fusetune_schema), so a crash mid-migration leaves the
// database at the previous version.
#ifndef FUSETUNE_DB_SRC_SCHEMA_H_
#define FUSETUNE_DB_SRC_SCHEMA_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "sql.h"

namespace fusetune::db_internal {

// One schema change, in both dialects: `sql` is SQLite's; PostgreSQL runs `postgres_sql`,
// or, when that is null, `sql` with SQLite's column types spelled as PostgreSQL's
// (PostgresSql), so that a table is defined once for both.
struct Migration {
  int version;              // the schema version after this migration
  const char* description;  // one line, for error messages
  const char* sql;          // one or more statements, no transaction control
  // Run after the SQL, in the same transaction, for what SQL alone cannot say (null: none).
  absl::Status (*rewrite)(Connection& c) = nullptr;
  // PostgreSQL's statements where the translation of `sql` does not fit (null: translate).
  const char* postgres_sql = nullptr;
};

// The statements PostgreSQL runs for `m`: postgres_sql, else `sql` with INTEGER PRIMARY KEY
// AUTOINCREMENT as a BIGINT identity, INTEGER as BIGINT and REAL as DOUBLE PRECISION.
std::string PostgresSql(const Migration& m);

// A column that names a commit.
struct CommitColumn {
  const char* table;
  const char* column;
};
// Every column of the latest schema that names a commit.
const std::vector<CommitColumn>& CommitColumns();

// Versions 1..N in order, contiguous.
const std::vector<Migration>& Migrations();

// The refusal of a file whose schema version is newer than this binary's `latest` (an old
// binary must not write, or misread, a newer schema). FailedPrecondition naming `path`.
absl::Status SchemaNewerThanBinary(std::string_view path, int version, int latest);

// Brings the database on `c` to migrations.back().version. Must run inside the caller's
// write transaction (BEGIN IMMEDIATE), which makes the check and the upgrade atomic across
// processes and undoes a failed migration entirely. FailedPrecondition if the file's
// user_version is newer than the list's last version; Internal (naming the migration) if a
// migration's SQL fails. `path` only labels messages.
absl::Status ApplyMigrations(Connection& c, const std::vector<Migration>& migrations,
                             std::string_view path);

}  // namespace fusetune::db_internal

#endif  // FUSETUNE_DB_SRC_SCHEMA_H_
