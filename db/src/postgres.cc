#include "postgres.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "fusetune/base/strings.h"
#include "fusetune/db/store.h"

namespace fusetune::db_internal {
namespace {

// The type OIDs of the parameters a statement sends (PostgreSQL's pg_type.h).
constexpr Oid kInt8Oid = 20;
constexpr Oid kTextOid = 25;
constexpr Oid kFloat8Oid = 701;

// A PGresult released when it goes out of scope.
struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultDeleter>;

bool CommandOk(const PGresult* r) {
  const ExecStatusType st = PQresultStatus(r);
  // An empty statement (a migration that is all rewrite) is a success with nothing done.
  return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_EMPTY_QUERY;
}

// libpq writes NOTICEs (e.g. "relation already exists, skipping") to stderr by default; a
// store has nothing to tell its caller's terminal.
void IgnoreNotice(void*, const char*) {}

class PostgresStatement final : public StatementImpl {
 public:
  PostgresStatement(PostgresConnection* conn, const std::string* sql) : conn_(conn), sql_(sql) {}

  void BindInt64(int index, int64_t value) override { Set(index, absl::StrCat(value), kInt8Oid); }
  void BindDouble(int index, double value) override {
    // 17 significant digits: the double read back is the one bound.
    char text[32];
    std::snprintf(text, sizeof(text), "%.17g", value);
    Set(index, text, kFloat8Oid);
  }
  void BindText(int index, std::string_view value) override { Set(index, ToPostgresText(value), kTextOid); }
  void BindNull(int index) override {
    Grow(index);
    null_[index - 1] = true;
    types_[index - 1] = 0;  // untyped: the server infers it from the context
  }

  absl::StatusOr<bool> Step() override {
    if (result_ == nullptr) {
      std::vector<const char*> values(values_.size());
      for (size_t i = 0; i < values_.size(); ++i) values[i] = null_[i] ? nullptr : values_[i].c_str();
      result_.reset(conn_->Execute([&] {
        return PQexecParams(conn_->raw(), sql_->c_str(), static_cast<int>(values.size()), types_.data(),
                            values.data(), nullptr, nullptr, /*resultFormat=*/0);
      }));
      if (result_ == nullptr || !CommandOk(result_.get())) return conn_->Error(result_.get());
      conn_->NoteChanges(result_.get());
      row_ = -1;
    }
    ++row_;
    return row_ < PQntuples(result_.get());
  }

  bool IsNull(int col) const override { return PQgetisnull(result_.get(), row_, col) != 0; }
  int64_t Int64(int col) const override {
    return IsNull(col) ? 0 : std::strtoll(PQgetvalue(result_.get(), row_, col), nullptr, 10);
  }
  double Double(int col) const override { return std::strtod(PQgetvalue(result_.get(), row_, col), nullptr); }
  std::string Text(int col) const override {
    return std::string(PQgetvalue(result_.get(), row_, col),
                       static_cast<size_t>(PQgetlength(result_.get(), row_, col)));
  }

 private:
  void Grow(int index) {
    if (index > static_cast<int>(values_.size())) {
      values_.resize(index);
      null_.resize(index, true);
      types_.resize(index, 0);
    }
  }
  void Set(int index, std::string value, Oid type) {
    Grow(index);
    values_[index - 1] = std::move(value);
    null_[index - 1] = false;
    types_[index - 1] = type;
  }

  PostgresConnection* conn_;
  const std::string* sql_;  // owned by the connection's cache of rewritten SQL
  std::vector<std::string> values_;
  std::vector<bool> null_;
  std::vector<Oid> types_;
  Result result_;
  int row_ = -1;
};

}  // namespace

absl::Status PostgresError(std::string_view sqlstate, std::string_view server_message, std::string_view name) {
  const std::string db(name);
  const std::string says =
      absl::StrCat(" (PostgreSQL", sqlstate.empty() ? "" : absl::StrCat(" ", std::string(sqlstate)), ": ",
                   std::string(absl::StripTrailingAsciiWhitespace(ToAbsl(server_message))), ")");
  const auto code_is = [&](std::string_view prefix) { return sqlstate.starts_with(prefix); };
  if (code_is("08") || code_is("57P")) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach database ", db, says, "; check that the server is running and the URL's host"));
  }
  if (code_is("28")) {
    return absl::PermissionDeniedError(absl::StrCat(
        "database ", db, " refused the login", says,
        "; check the user name and the password (in PGPASSFILE, ~/.pgpass or the URL)"));
  }
  if (sqlstate == "42501" || sqlstate == "25006") {
    return absl::PermissionDeniedError(absl::StrCat("database ", db, ": this role may not do that", says,
                                                    "; writing needs a role granted INSERT, UPDATE and DELETE"));
  }
  if (code_is("23")) {
    return absl::FailedPreconditionError(
        absl::StrCat("database ", db, ": the change breaks a constraint of the schema", says));
  }
  if (code_is("22")) return absl::InvalidArgumentError(absl::StrCat("database ", db, ": value refused", says));
  if (sqlstate == "40001" || sqlstate == "40P01" || sqlstate == "55P03") {
    return absl::UnavailableError(absl::StrCat("database ", db, " is busy (a lock wait timed out or a transaction ",
                                               "conflicted)", says, "; try again"));
  }
  if (code_is("53")) {
    return absl::ResourceExhaustedError(absl::StrCat("database ", db, " ran out of a resource", says));
  }
  if (sqlstate == "XX001" || sqlstate == "XX002") {
    return absl::DataLossError(absl::StrCat("database ", db, " is damaged", says, "; restore it from a backup"));
  }
  if (sqlstate == "3D000") {
    return absl::NotFoundError(absl::StrCat("database ", db, " does not exist", says,
                                            "; create it first (createdb)"));
  }
  return absl::InternalError(absl::StrCat("database ", db, ": unexpected PostgreSQL failure", says));
}

std::string ToPostgresText(std::string_view text) {
  // The length of the valid UTF-8 sequence at text[i], 0 when there is none.
  const auto sequence_length = [&](size_t i) -> size_t {
    const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char b = byte(i);
    if (b >= 0x01 && b <= 0x7f) return 1;
    size_t n = 0;
    uint32_t cp = 0;
    if (b >= 0xc2 && b <= 0xdf) {
      n = 2;
      cp = b & 0x1f;
    } else if (b >= 0xe0 && b <= 0xef) {
      n = 3;
      cp = b & 0x0f;
    } else if (b >= 0xf0 && b <= 0xf4) {
      n = 4;
      cp = b & 0x07;
    } else {
      return 0;  // NUL, a continuation byte, or a byte no UTF-8 sequence starts with
    }
    if (i + n > text.size()) return 0;
    for (size_t k = 1; k < n; ++k) {
      if ((byte(i + k) & 0xc0) != 0x80) return 0;
      cp = (cp << 6) | (byte(i + k) & 0x3f);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff)) {
      return 0;
    }
    return n;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = sequence_length(i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string ToPostgresParameters(std::string_view sql) {
  std::string out;
  out.reserve(sql.size());
  bool quoted = false;
  for (size_t i = 0; i < sql.size(); ++i) {
    const char ch = sql[i];
    if (ch == '\'') quoted = !quoted;
    if (!quoted && ch == '?' && i + 1 < sql.size() && sql[i + 1] >= '0' && sql[i + 1] <= '9') {
      out.push_back('$');
    } else {
      out.push_back(ch);
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<PostgresConnection>> PostgresConnection::Open(const std::string& url,
                                                                             int lock_timeout_ms) {
  const std::string name = RedactDatabaseUrl(url);
  // Keywords before the URL are defaults the URL may override: a server that does not answer
  // fails the open after 10 s instead of the TCP timeout.
  const char* keywords[] = {"connect_timeout", "application_name", "dbname", nullptr};
  const char* values[] = {"10", "fusetune", url.c_str(), nullptr};
  PGconn* conn = PQconnectdbParams(keywords, values, /*expand_dbname=*/1);
  if (conn == nullptr) return absl::ResourceExhaustedError("out of memory connecting to PostgreSQL");
  if (PQstatus(conn) != CONNECTION_OK) {
    // libpq's connection messages carry no SQLSTATE; they name the host and the user, never
    // the password.
    const std::string message = PQerrorMessage(conn);
    PQfinish(conn);
    const bool auth = absl::StrContains(message, "authentication failed") ||
                      absl::StrContains(message, "no password supplied") ||
                      absl::StrContains(message, "password is required") ||
                      absl::StrContains(message, "role \"");
    if (absl::StrContains(message, "database \"") && absl::StrContains(message, "does not exist")) {
      return PostgresError("3D000", message, name);
    }
    return PostgresError(auth ? "28000" : "08006", message, name);
  }
  PQsetNoticeProcessor(conn, IgnoreNotice, nullptr);
  std::unique_ptr<PostgresConnection> c(new PostgresConnection(conn, name));
  absl::Status st = c->SetForConnection(absl::StrCat("SET lock_timeout = ", lock_timeout_ms));
  if (!st.ok()) return st;
  return c;
}

PostgresConnection::~PostgresConnection() { PQfinish(conn_); }

absl::Status PostgresConnection::Error(const PGresult* result) const {
  // No result at all: libpq could not send or the connection is gone (the server is down or
  // restarting), which is "cannot reach the database", not an unexpected failure.
  if (result == nullptr) {
    return PostgresError(PQstatus(conn_) != CONNECTION_OK ? "08006" : "", PQerrorMessage(conn_), name_);
  }
  const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
  std::string message = PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY) != nullptr
                            ? PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY)
                            : PQresultErrorMessage(result);
  // The server gives every error of its own a SQLSTATE; one without is libpq's: the
  // connection was lost (or could not be made again).
  if (PQstatus(conn_) != CONNECTION_OK || state == nullptr || *state == '\0') {
    return PostgresError("08006", message, name_);
  }
  return PostgresError(state, message, name_);
}

void PostgresConnection::NoteChanges(const PGresult* result) {
  const char* tuples = PQcmdTuples(const_cast<PGresult*>(result));
  changes_ = (tuples != nullptr && *tuples != '\0') ? std::strtoll(tuples, nullptr, 10) : 0;
}

absl::Status PostgresConnection::SetForConnection(std::string_view sql) {
  absl::Status st = Exec(sql);
  if (st.ok()) connection_settings_.emplace_back(sql);
  return st;
}

PGresult* PostgresConnection::Execute(const std::function<PGresult*()>& send) {
  // Whether a transaction is open is our own record, not libpq's: libpq cannot tell once the
  // connection is lost, and a read outside a transaction must still be retried then.
  const bool idle = !in_transaction_;
  PGresult* r = send();
  if (!idle || PQstatus(conn_) != CONNECTION_BAD) return r;
  if (!Reconnect()) return r;  // still away: the first failure is the answer
  PQclear(r);
  return send();
}

bool PostgresConnection::Reconnect() {
  PQreset(conn_);
  if (PQstatus(conn_) != CONNECTION_OK) return false;
  for (const std::string& setting : connection_settings_) {
    Result applied(PQexec(conn_, setting.c_str()));
    if (applied == nullptr || !CommandOk(applied.get())) return false;
  }
  return true;
}

absl::Status PostgresConnection::Begin(std::string_view sql) {
  if (PQstatus(conn_) == CONNECTION_BAD) (void)Reconnect();
  return Exec(sql);
}

absl::Status PostgresConnection::Exec(std::string_view sql) {
  const std::string text(sql);
  Result r(Execute([&] { return PQexec(conn_, text.c_str()); }));
  // A transaction ends with its COMMIT or ROLLBACK whether or not that reached the server (a
  // lost connection ended it there too); it is open once a BEGIN succeeded.
  if (absl::StartsWith(text, "COMMIT") || absl::StartsWith(text, "ROLLBACK")) in_transaction_ = false;
  if (r == nullptr || !CommandOk(r.get())) return Error(r.get());
  if (absl::StartsWith(text, "BEGIN")) in_transaction_ = true;
  NoteChanges(r.get());
  return absl::OkStatus();
}

absl::StatusOr<std::string> PostgresConnection::QueryText(std::string_view sql) {
  const std::string text(sql);
  Result r(Execute([&] { return PQexec(conn_, text.c_str()); }));
  if (r == nullptr || !CommandOk(r.get())) return Error(r.get());
  if (PQntuples(r.get()) == 0 || PQnfields(r.get()) == 0) return std::string();
  return std::string(PQgetvalue(r.get(), 0, 0));
}

absl::StatusOr<Statement> PostgresConnection::Prepare(const std::string& sql) {
  auto it = rewritten_.find(sql);
  if (it == rewritten_.end()) it = rewritten_.emplace(sql, ToPostgresParameters(sql)).first;
  return Statement(std::make_unique<PostgresStatement>(this, &it->second));
}

absl::StatusOr<int64_t> PostgresConnection::LastInsertRowId() {
  // lastval(): the value this connection's last nextval() gave, i.e. the identity column of the
  // row the last INSERT made.
  absl::StatusOr<std::string> text = QueryText("SELECT lastval()");
  if (!text.ok()) return text.status();
  return std::strtoll(text->c_str(), nullptr, 10);
}

bool PostgresConnection::InTransaction() const { return in_transaction_; }

absl::StatusOr<int> PostgresConnection::ReadSchemaVersion() {
  // A database without the table has no fusetune schema yet (version 0).
  absl::StatusOr<std::string> exists = QueryText("SELECT to_regclass('fusetune_schema') IS NOT NULL");
  if (!exists.ok()) return exists.status();
  if (*exists != "t") return 0;
  absl::StatusOr<std::string> text = QueryText("SELECT COALESCE(MAX(version), 0) FROM fusetune_schema");
  if (!text.ok()) return text.status();
  return std::atoi(text->c_str());
}

absl::Status PostgresConnection::WriteSchemaVersion(int version) {
  return Exec(absl::StrCat("CREATE TABLE IF NOT EXISTS fusetune_schema (version INTEGER NOT NULL); ",
                           "DELETE FROM fusetune_schema; INSERT INTO fusetune_schema (version) VALUES (", version,
                           ")"));
}

absl::Status PostgresConnection::LockSchema() {
  // Any constant works, as long as every fusetune binary uses the same one.
  return Exec("SELECT pg_advisory_xact_lock(hashtext('fusetune_schema'))");
}

}  // namespace fusetune::db_internal
