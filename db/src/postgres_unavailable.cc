#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "fusetune/db/copy.h"
#include "fusetune/db/store.h"
#include "store_open.h"

// Store::Open of a postgresql:// URL in a build made without libpq (CMake found no
// PostgreSQL): a clear refusal instead of a missing feature discovered later.

namespace fusetune::db_internal {

absl::StatusOr<std::unique_ptr<Store>> OpenPostgresStore(const std::string& url, const StoreOptions&) {
  return absl::UnimplementedError(absl::StrCat(
      "cannot open ", RedactDatabaseUrl(url),
      ": this fusetune was built without PostgreSQL support (CMake found no libpq); install libpq-dev "
      "(ci/setup-debian.sh does) and rebuild, or use an SQLite file"));
}

}  // namespace fusetune::db_internal

namespace fusetune {

absl::StatusOr<std::vector<TableCopy>> CopySqliteToPostgres(const std::string&, const std::string& to) {
  return absl::UnimplementedError(absl::StrCat("cannot copy into ", RedactDatabaseUrl(to),
                                               ": this fusetune was built without PostgreSQL support"));
}

}  // namespace fusetune
