#include "sqlite.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace fusetune::db_internal {

absl::Status SqliteError(sqlite3* db, int rc, std::string_view what) {
  const char* detail = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  const std::string msg = absl::StrCat(std::string(what), ": sqlite error ", rc, " (", detail, ")");
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(absl::StrCat(msg,
                                                 "; the database stayed locked by another "
                                                 "connection past the busy timeout"));
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(msg);
    case SQLITE_CONSTRAINT:
      return absl::FailedPreconditionError(msg);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(msg);
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_AUTH:
      return absl::PermissionDeniedError(msg);
    case SQLITE_CANTOPEN:
      return absl::UnavailableError(msg);
    case SQLITE_TOOBIG:
    case SQLITE_RANGE:
    case SQLITE_MISMATCH:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_), stmt_(other.stmt_), bind_rc_(other.bind_rc_) {
  other.stmt_ = nullptr;
}

Statement::~Statement() {
  if (stmt_ != nullptr) {
    // Resetting releases the statement's read snapshot / locks; the statement stays cached.
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
}

Statement& Statement::Bind(int index, int64_t value) {
  const int rc = sqlite3_bind_int64(stmt_, index, value);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  return *this;
}

Statement& Statement::Bind(int index, double value) {
  const int rc = std::isnan(value) ? sqlite3_bind_null(stmt_, index)
                                   : sqlite3_bind_double(stmt_, index, value);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  return *this;
}

Statement& Statement::Bind(int index, std::string_view value) {
  // A default-constructed string_view has data() == nullptr, which SQLite would bind as NULL;
  // an empty string must stay '' (NULL = '' is not true in SQL).
  const char* data = value.data() != nullptr ? value.data() : "";
  const int rc =
      sqlite3_bind_text64(stmt_, index, data, value.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  return *this;
}

Statement& Statement::BindNull(int index) {
  const int rc = sqlite3_bind_null(stmt_, index);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  return *this;
}

Statement& Statement::BindIdOrNull(int index, int64_t value) {
  return value == 0 ? BindNull(index) : Bind(index, value);
}

absl::StatusOr<bool> Statement::Step() {
  if (bind_rc_ != SQLITE_OK) return SqliteError(db_, bind_rc_, "binding a parameter");
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteError(db_, rc, absl::StrCat("executing '", sqlite3_sql(stmt_), "'"));
}

absl::Status Statement::Run() {
  while (true) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) return absl::OkStatus();
  }
}

bool Statement::IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

int64_t Statement::Int64(int col) const { return sqlite3_column_int64(stmt_, col); }

double Statement::Double(int col) const {
  if (IsNull(col)) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(stmt_, col);
}

std::string Statement::Text(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  if (p == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(p),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(const std::string& path,
                                                             int busy_timeout_ms) {
  sqlite3* db = nullptr;
  const int flags =
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI;
  const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status st = SqliteError(db, rc, absl::StrCat("opening '", path, "'"));
    sqlite3_close_v2(db);  // a handle is returned even on failure
    return st;
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, busy_timeout_ms);
  return std::unique_ptr<Connection>(new Connection(db));
}

Connection::~Connection() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  sqlite3_close_v2(db_);
}

absl::Status Connection::Exec(std::string_view sql) {
  char* err = nullptr;
  const std::string text(sql);
  const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err);
  if (err != nullptr) sqlite3_free(err);
  if (rc != SQLITE_OK)
    return SqliteError(db_, rc, absl::StrCat("executing '", std::string(sql.substr(0, 80)), "'"));
  return absl::OkStatus();
}

absl::StatusOr<std::string> Connection::QueryText(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK)
    return SqliteError(db_, rc, absl::StrCat("preparing '", std::string(sql), "'"));
  std::string value;
  rc = sqlite3_step(stmt);
  if (rc == SQLITE_ROW) {
    const unsigned char* p = sqlite3_column_text(stmt, 0);
    if (p != nullptr) value = reinterpret_cast<const char*>(p);
    rc = SQLITE_OK;
  } else if (rc == SQLITE_DONE) {
    rc = SQLITE_OK;
  }
  absl::Status st = rc == SQLITE_OK
                        ? absl::OkStatus()
                        : SqliteError(db_, rc, absl::StrCat("executing '", std::string(sql), "'"));
  sqlite3_finalize(stmt);
  if (!st.ok()) return st;
  return value;
}

absl::StatusOr<Statement> Connection::Prepare(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it == cache_.end()) {
    sqlite3_stmt* stmt = nullptr;
    const int rc = sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size()),
                                      SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK)
      return SqliteError(db_, rc, absl::StrCat("preparing '", std::string(sql), "'"));
    it = cache_.emplace(sql, stmt).first;
  }
  return Statement(db_, it->second);
}

}  // namespace fusetune::db_internal
