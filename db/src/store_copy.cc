#include <sqlite3.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fusetune/db/copy.h"
#include "fusetune/db/store.h"
#include "postgres.h"
#include "sqlite.h"
#include "status_macros.h"

// `fusetune db copy`: rows are read from SQLite with the raw C API (each value as the type
// SQLite stored it) and written through the PostgreSQL connection's typed parameters.

namespace fusetune {
namespace {

using db_internal::PostgresConnection;
using db_internal::SqliteConnection;
using db_internal::Statement;

// The tables in foreign-key order (runs before what refers to them), each with the column
// PostgreSQL assigns ids from (empty: none).
struct CopiedTable {
  const char* name;
  const char* identity;
};
constexpr CopiedTable kTables[] = {
    {"runs", "run_id"},           {"trials", ""},         {"best_configs", ""},
    {"regressions", "regression_id"}, {"workers", ""},    {"jobs", "job_id"},
    {"audits", "audit_id"},       {"bench_cells", "bench_cell_id"}, {"change_points", "change_point_id"},
};

// One value of a source row, as SQLite stored it.
struct Value {
  int type = SQLITE_NULL;
  int64_t integer = 0;
  double real = 0;
  std::string text;
};

void BindValue(Statement& s, int index, const Value& v) {
  switch (v.type) {
    case SQLITE_INTEGER:
      s.Bind(index, v.integer);
      break;
    case SQLITE_FLOAT:
      s.Bind(index, v.real);
      break;
    case SQLITE_TEXT:
    case SQLITE_BLOB:
      s.Bind(index, std::string_view(v.text));
      break;
    default:
      s.BindNull(index);
  }
}

absl::StatusOr<std::vector<std::string>> ColumnsOf(SqliteConnection& source, const std::string& table) {
  FT_DB_ASSIGN_OR_RETURN(Statement s, source.Prepare(absl::StrCat("SELECT name FROM pragma_table_info('", table, "')")));
  std::vector<std::string> columns;
  while (true) {
    FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    columns.push_back(s.Text(0));
  }
  if (columns.empty()) return absl::FailedPreconditionError(absl::StrCat("the source has no table ", table));
  return columns;
}

absl::StatusOr<int64_t> CountRows(db_internal::Connection& c, const std::string& table) {
  FT_DB_ASSIGN_OR_RETURN(std::string text, c.QueryText(absl::StrCat("SELECT COUNT(*) FROM ", table)));
  return std::stoll(text);
}

absl::StatusOr<TableCopy> CopyTable(SqliteConnection& source, PostgresConnection& target, const CopiedTable& t) {
  TableCopy report;
  report.table = t.name;
  FT_DB_ASSIGN_OR_RETURN(const std::vector<std::string> columns, ColumnsOf(source, t.name));
  std::vector<std::string> params, same;
  for (size_t i = 0; i < columns.size(); ++i) {
    params.push_back(absl::StrCat("?", i + 1));
    same.push_back(absl::StrCat(columns[i], " IS NOT DISTINCT FROM ?", i + 1));
  }
  const std::string column_list = absl::StrJoin(columns, ", ");
  const std::string insert = absl::StrCat("INSERT INTO ", t.name, " (", column_list, ") VALUES (",
                                          absl::StrJoin(params, ", "), ") ON CONFLICT DO NOTHING");
  const std::string identical = absl::StrCat("SELECT COUNT(*) FROM ", t.name, " WHERE ", absl::StrJoin(same, " AND "));

  sqlite3_stmt* rows = nullptr;
  const std::string select = absl::StrCat("SELECT ", column_list, " FROM ", t.name, " ORDER BY rowid");
  if (sqlite3_prepare_v2(source.raw(), select.c_str(), -1, &rows, nullptr) != SQLITE_OK) {
    return source.Error(sqlite3_errcode(source.raw()));
  }
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> finalize(rows, sqlite3_finalize);
  std::vector<Value> values(columns.size());
  while (true) {
    const int rc = sqlite3_step(rows);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return source.Error(rc);
    ++report.source_rows;
    for (size_t i = 0; i < columns.size(); ++i) {
      Value& v = values[i];
      v.type = sqlite3_column_type(rows, static_cast<int>(i));
      if (v.type == SQLITE_INTEGER) v.integer = sqlite3_column_int64(rows, static_cast<int>(i));
      if (v.type == SQLITE_FLOAT) v.real = sqlite3_column_double(rows, static_cast<int>(i));
      if (v.type == SQLITE_TEXT || v.type == SQLITE_BLOB) {
        const void* p = sqlite3_column_blob(rows, static_cast<int>(i));
        v.text.assign(static_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(rows, static_cast<int>(i))));
      }
    }
    {
      FT_DB_ASSIGN_OR_RETURN(Statement s, target.Prepare(insert));
      for (size_t i = 0; i < values.size(); ++i) BindValue(s, static_cast<int>(i) + 1, values[i]);
      FT_DB_RETURN_IF_ERROR(s.Run());
    }
    if (target.Changes() == 1) {
      ++report.copied_rows;
      continue;
    }
    // A key the target already holds: an earlier copy's row (identical: skipped), or other
    // data under the same key (refused: merging would silently mix two databases).
    FT_DB_ASSIGN_OR_RETURN(Statement s, target.Prepare(identical));
    for (size_t i = 0; i < values.size(); ++i) BindValue(s, static_cast<int>(i) + 1, values[i]);
    FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row || s.Int64(0) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "table ", t.name, ": source row ", report.source_rows, " conflicts with a different row ",
          "already in the target (the same key, other content); copy into an empty database, nothing was copied"));
    }
    ++report.present_rows;
  }
  FT_DB_ASSIGN_OR_RETURN(report.target_rows, CountRows(target, t.name));
  if (report.copied_rows + report.present_rows != report.source_rows || report.target_rows < report.source_rows) {
    return absl::InternalError(absl::StrCat("table ", t.name, ": verification failed (", report.source_rows,
                                            " source rows, ", report.copied_rows, " copied, ", report.present_rows,
                                            " present, ", report.target_rows, " in the target); nothing was copied"));
  }
  if (*t.identity != '\0') {
    // Rows came with their ids; the next id the database assigns must be past them.
    FT_DB_RETURN_IF_ERROR(target.Exec(absl::StrCat("SELECT setval(pg_get_serial_sequence('", t.name, "', '",
                                                   t.identity, "'), COALESCE((SELECT MAX(", t.identity, ") FROM ",
                                                   t.name, "), 0) + 1, false)")));
  }
  return report;
}

}  // namespace

absl::StatusOr<std::vector<TableCopy>> CopySqliteToPostgres(const std::string& from, const std::string& to) {
  if (!IsPostgresUrl(to)) {
    return absl::InvalidArgumentError(absl::StrCat("--to must be a postgresql:// URL, got ", RedactDatabaseUrl(to)));
  }
  if (IsPostgresUrl(from)) return absl::InvalidArgumentError("--from must be an SQLite file");
  // Both stores opened as the commands open them: the source read-only at this binary's exact
  // schema, the target created or migrated to it.
  StoreOptions read_only;
  read_only.access = StoreAccess::kReadOnly;
  FT_DB_RETURN_IF_ERROR(Store::Open(from, read_only).status());
  FT_DB_RETURN_IF_ERROR(Store::Open(to).status());

  FT_DB_ASSIGN_OR_RETURN(std::unique_ptr<SqliteConnection> source,
                         SqliteConnection::Open(from, 10000, db_internal::OpenMode::kReadOnly));
  FT_DB_ASSIGN_OR_RETURN(std::unique_ptr<PostgresConnection> target, PostgresConnection::Open(to, 10000));
  // One snapshot of the source, one transaction on the target: all or nothing.
  FT_DB_RETURN_IF_ERROR(source->BeginRead());
  FT_DB_RETURN_IF_ERROR(target->BeginWrite());
  std::vector<TableCopy> reports;
  absl::Status st;
  for (const CopiedTable& t : kTables) {
    absl::StatusOr<TableCopy> copied = CopyTable(*source, *target, t);
    if (!copied.ok()) {
      st = copied.status();
      break;
    }
    reports.push_back(*copied);
  }
  if (st.ok()) st = target->Exec("COMMIT");
  if (!st.ok() && target->InTransaction()) (void)target->Exec("ROLLBACK");
  (void)source->Exec("COMMIT");
  if (!st.ok()) return st;
  return reports;
}

}  // namespace fusetune
