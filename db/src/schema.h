// The store's schema as an ordered list of forward-only migrations (internal to db/).
//
// Migration N takes a database at user_version N-1 to N. Migrations are append-only: a
// released migration is never edited, a schema change is a new entry at the end. Each one
// runs inside the same BEGIN IMMEDIATE transaction that bumps PRAGMA user_version, so a
// crash mid-migration leaves the database at the previous version.
#ifndef FUSETUNE_DB_SRC_SCHEMA_H_
#define FUSETUNE_DB_SRC_SCHEMA_H_

#include <vector>

namespace fusetune::db_internal {

struct Migration {
  int version;              // the user_version after this migration
  const char* description;  // one line, for error messages
  const char* sql;          // one or more statements, no transaction control
};

// Versions 1..N in order, contiguous.
const std::vector<Migration>& Migrations();

}  // namespace fusetune::db_internal

#endif  // FUSETUNE_DB_SRC_SCHEMA_H_
