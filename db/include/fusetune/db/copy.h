// Copying an SQLite store into a PostgreSQL one (`fusetune db copy`): every row of every
// table, in one transaction, idempotently.
#ifndef FUSETUNE_DB_COPY_H_
#define FUSETUNE_DB_COPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fusetune {

// What the copy did to one table.
struct TableCopy {
  std::string table;
  int64_t source_rows = 0;   // rows in the SQLite table
  int64_t copied_rows = 0;   // inserted into PostgreSQL by this copy
  int64_t present_rows = 0;  // already there, identical (an earlier copy): skipped
  int64_t target_rows = 0;   // rows in the PostgreSQL table afterwards
};

// Copies the SQLite database at `from` (a file, opened read-only and never changed) into the
// PostgreSQL database at `to` (a postgresql:// URL; its schema is created or migrated first).
// Every row keeps its ids. All in one transaction: on any failure nothing is copied.
// Idempotent: a row already in the target, with the same content, is skipped, so a second
// copy copies nothing; a row whose key the target holds with other content is refused
// (FailedPrecondition naming the table and key: the target holds other data). Afterwards
// each table is verified: copied + present == source rows, and the target holds at least as
// many rows; the id sequences are moved past the copied ids.
//
// Errors: those of Store::Open for either side (NotFound for a missing file; the source must
// have this binary's schema version: an older file is upgraded by any writing command first);
// InvalidArgument when `to` is not a PostgreSQL URL; Unimplemented in a build without
// PostgreSQL support. Messages never hold the URL's password.
absl::StatusOr<std::vector<TableCopy>> CopySqliteToPostgres(const std::string& from, const std::string& to);

}  // namespace fusetune

#endif  // FUSETUNE_DB_COPY_H_
