#include "store_open.h"

#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "fusetune/base/strings.h"
#include "fusetune/db/store.h"
#include "schema.h"

// Store::Open: a postgresql:// (or postgres://) URL opens PostgreSQL, anything else names an
// SQLite file.

namespace fusetune {

bool IsPostgresUrl(std::string_view location) {
  const std::string lower = absl::AsciiStrToLower(ToAbsl(location.substr(0, 13)));
  return lower.starts_with("postgresql://") || lower.starts_with("postgres://");
}

std::string RedactDatabaseUrl(std::string_view location) {
  if (!IsPostgresUrl(location)) return std::string(location);
  std::string url(location);
  // The password of the userinfo: postgresql://user:PASSWORD@host/...
  const size_t authority = url.find("://") + 3;
  const size_t authority_end = url.find_first_of("/?#", authority);
  const size_t at = url.rfind('@', authority_end == std::string::npos ? url.size() : authority_end);
  if (at != std::string::npos && at >= authority) {
    const size_t colon = url.find(':', authority);
    if (colon != std::string::npos && colon < at) url.replace(colon + 1, at - colon - 1, "***");
  }
  // A password=... query parameter.
  const size_t query = url.find('?');
  if (query != std::string::npos) {
    size_t pos = query + 1;
    while (pos < url.size()) {
      size_t end = url.find('&', pos);
      if (end == std::string::npos) end = url.size();
      if (absl::StartsWithIgnoreCase(ToAbsl(std::string_view(url).substr(pos, end - pos)), "password=")) {
        url.replace(pos + 9, end - pos - 9, "***");
        end = pos + 9 + 3;
      }
      pos = end + 1;
    }
  }
  return url;
}

int Store::LatestSchemaVersion() { return db_internal::Migrations().back().version; }

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) { return Open(path, StoreOptions{}); }

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path, const StoreOptions& options) {
  if (IsPostgresUrl(path)) return db_internal::OpenPostgresStore(path, options);
  return db_internal::OpenSqliteStore(path, options);
}

}  // namespace fusetune
