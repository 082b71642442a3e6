// Store::Open's two halves and what picks between them (internal to db/).
#ifndef FUSETUNE_DB_SRC_STORE_OPEN_H_
#define FUSETUNE_DB_SRC_STORE_OPEN_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "fusetune/db/store.h"

namespace fusetune::db_internal {

// Store::Open of an SQLite file (sqlite_open.cc).
absl::StatusOr<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path, const StoreOptions& options);

// Store::Open of a postgresql:// URL (postgres_open.cc; without libpq at build time,
// postgres_unavailable.cc, which refuses with Unimplemented).
absl::StatusOr<std::unique_ptr<Store>> OpenPostgresStore(const std::string& url, const StoreOptions& options);

}  // namespace fusetune::db_internal

#endif  // FUSETUNE_DB_SRC_STORE_OPEN_H_
