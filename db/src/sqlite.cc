#include "sqlite.h"

#include <cmath>
#include <cstdlib>
#include <memory>
#include <limits>

#include "absl/strings/str_cat.h"

namespace fusetune::db_internal {

absl::Status SqliteError(int rc, std::string_view sqlite_message, std::string_view path) {
  const std::string file(path);
  const std::string sqlite_says = absl::StrCat(" (SQLite error ", rc, ": ", std::string(sqlite_message), ")");
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(absl::StrCat(
          "database ", file, " stayed locked by another connection past the busy timeout", sqlite_says,
          "; try again when the other writer has finished"));
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(absl::StrCat("database ", file, ": the disk is full", sqlite_says,
                                                       "; free space on its file system"));
    case SQLITE_CONSTRAINT:
      return absl::FailedPreconditionError(
          absl::StrCat("database ", file, ": the change breaks a constraint of the schema", sqlite_says));
    case SQLITE_CORRUPT:
      return absl::DataLossError(absl::StrCat("database ", file, " is damaged", sqlite_says,
                                              "; restore it from a backup (sqlite3 ", file,
                                              " 'PRAGMA integrity_check' shows what is broken)"));
    case SQLITE_NOTADB:
      return absl::DataLossError(absl::StrCat(file, " is not a fusetune database (not an SQLite file)", sqlite_says,
                                              "; check the database path"));
    case SQLITE_READONLY:
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot write database ", file, ": the file or its directory is read-only for this process", sqlite_says,
          "; writing needs write access to both (SQLite keeps ", file, "-wal and ", file,
          "-shm beside the file), reading commands do not"));
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::PermissionDeniedError(
          absl::StrCat("database ", file, ": access denied", sqlite_says, "; check the file's permissions"));
    case SQLITE_CANTOPEN:
      return absl::UnavailableError(absl::StrCat(
          "cannot open database ", file, sqlite_says,
          "; check that its directory exists and that this process may read the file (and, to write, create "
          "files in its directory)"));
    case SQLITE_IOERR:
      return absl::InternalError(
          absl::StrCat("database ", file, ": I/O error", sqlite_says, "; check the disk and its file system"));
    case SQLITE_TOOBIG:
    case SQLITE_RANGE:
    case SQLITE_MISMATCH:
      return absl::InvalidArgumentError(absl::StrCat("database ", file, ": value refused", sqlite_says));
    default:
      return absl::InternalError(absl::StrCat("database ", file, ": unexpected SQLite failure", sqlite_says));
  }
}

SqliteStatement::~SqliteStatement() {
  // Resetting releases the statement's read snapshot / locks; the statement stays cached.
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

void SqliteStatement::BindInt64(int index, int64_t value) { Keep(sqlite3_bind_int64(stmt_, index, value)); }

void SqliteStatement::BindDouble(int index, double value) { Keep(sqlite3_bind_double(stmt_, index, value)); }

void SqliteStatement::BindText(int index, std::string_view value) {
  // A default-constructed string_view has data() == nullptr, which SQLite would bind as NULL;
  // an empty string must stay '' (NULL = '' is not true in SQL).
  const char* data = value.data() != nullptr ? value.data() : "";
  Keep(sqlite3_bind_text64(stmt_, index, data, value.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
}

void SqliteStatement::BindNull(int index) { Keep(sqlite3_bind_null(stmt_, index)); }

absl::StatusOr<bool> SqliteStatement::Step() {
  if (bind_rc_ != SQLITE_OK) return conn_->Error(bind_rc_);
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return conn_->Error(rc);
}

bool SqliteStatement::IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

int64_t SqliteStatement::Int64(int col) const { return sqlite3_column_int64(stmt_, col); }

double SqliteStatement::Double(int col) const { return sqlite3_column_double(stmt_, col); }

std::string SqliteStatement::Text(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  if (p == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(p),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
}

namespace {

// A file name as an SQLite URI path: '%', '?' and '#' (and control bytes) are escaped.
std::string UriPath(const std::string& path) {
  std::string out;
  for (const char ch : path) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '%' || c == '?' || c == '#' || c < 0x20) {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    } else {
      out.push_back(ch);
    }
  }
  // "file:" + "//" + "/abs/path" for an absolute path (empty authority); relative paths
  // follow "file:" directly.
  return path.starts_with("/") ? absl::StrCat("file://", out) : absl::StrCat("file:", out);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteConnection>> SqliteConnection::Open(const std::string& path,
                                                             int busy_timeout_ms, OpenMode mode) {
  // `path` is a file name, never a URI: the name that messages show is the file opened.
  std::string name = path;
  int flags = SQLITE_OPEN_NOMUTEX;
  switch (mode) {
    case OpenMode::kReadWriteCreate:
      flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
      break;
    case OpenMode::kReadOnly:
      flags |= SQLITE_OPEN_READONLY;
      break;
    case OpenMode::kImmutable:
      flags |= SQLITE_OPEN_READONLY | SQLITE_OPEN_URI;
      name = absl::StrCat(UriPath(path), "?immutable=1");
      break;
  }
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(name.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status st = SqliteError(rc, db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc), path);
    sqlite3_close_v2(db);  // a handle is returned even on failure
    return st;
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, busy_timeout_ms);
  return std::unique_ptr<SqliteConnection>(new SqliteConnection(db, path));
}

absl::Status SqliteConnection::Error(int rc) const { return SqliteError(rc, sqlite3_errmsg(db_), path_); }

SqliteConnection::~SqliteConnection() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  sqlite3_close_v2(db_);
}

absl::Status SqliteConnection::Exec(std::string_view sql) {
  char* err = nullptr;
  const std::string text(sql);
  const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err);
  if (err != nullptr) sqlite3_free(err);
  if (rc != SQLITE_OK) return Error(rc);
  return absl::OkStatus();
}

absl::StatusOr<std::string> SqliteConnection::QueryText(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc);
  std::string value;
  rc = sqlite3_step(stmt);
  if (rc == SQLITE_ROW) {
    const unsigned char* p = sqlite3_column_text(stmt, 0);
    if (p != nullptr) value = reinterpret_cast<const char*>(p);
    rc = SQLITE_OK;
  } else if (rc == SQLITE_DONE) {
    rc = SQLITE_OK;
  }
  absl::Status st = rc == SQLITE_OK ? absl::OkStatus() : Error(rc);
  sqlite3_finalize(stmt);
  if (!st.ok()) return st;
  return value;
}

absl::StatusOr<Statement> SqliteConnection::Prepare(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it == cache_.end()) {
    sqlite3_stmt* stmt = nullptr;
    const int rc = sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size()),
                                      SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) return Error(rc);
    it = cache_.emplace(sql, stmt).first;
  }
  return Statement(std::make_unique<SqliteStatement>(this, it->second));
}

absl::StatusOr<int> SqliteConnection::ReadSchemaVersion() {
  absl::StatusOr<std::string> text = QueryText("PRAGMA user_version");
  if (!text.ok()) return text.status();
  return std::atoi(text->c_str());
}

absl::Status SqliteConnection::WriteSchemaVersion(int version) {
  return Exec(absl::StrCat("PRAGMA user_version = ", version));
}

}  // namespace fusetune::db_internal
