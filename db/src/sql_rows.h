// What the SqlStore's files share besides the SqlStore class (sql_store.h): the JSON
// columns, the runs row reader, the run-exists check and the row loop. Backend-independent
// input checks are in store_validation.h.
//
// Internal to db/: nothing outside this directory includes it.

#ifndef FUSETUNE_DB_SRC_SQL_ROWS_H_
#define FUSETUNE_DB_SRC_SQL_ROWS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/db/store.h"
#include "sql.h"
#include "status_macros.h"
#include "store_validation.h"

namespace fusetune {

namespace db_internal {

// ---- JSON columns (defined in sql_trials.cc; db/README.md lists the keys)

// A list of samples; NaN is written as null and read back as NaN.
std::string SamplesToJson(const std::vector<double>& samples);
absl::StatusOr<std::vector<double>> SamplesFromJson(const std::string& text);  // DataLoss if malformed
// Timing blocks with the device state read around each.
std::string BlocksToJson(const std::vector<SampleBlock>& blocks);
absl::StatusOr<std::vector<SampleBlock>> BlocksFromJson(const std::string& text);  // DataLoss if malformed

// ---- runs (defined in sql_store.cc)

// The columns ReadRun reads, in its order, unqualified (SELECT them FROM runs).
extern const char kRunColumns[];
// DataLoss when device_json is malformed.
absl::StatusOr<RunInfo> ReadRun(const Statement& s);

// NotFound "run <id> does not exist" unless the run is stored; checked before writing rows
// that refer to a run, so an unknown run is a clear NotFound, not a constraint error.
absl::Status CheckRunExists(Connection& c, int64_t run_id);

// Steps `s` through all its rows and reads each with `read`, a row reader that returns the
// Row, or StatusOr<Row> where a column may be malformed (DataLoss). The first error stops it.
template <typename Row, typename Reader>
absl::StatusOr<std::vector<Row>> ReadRows(Statement& s, Reader read) {
  std::vector<Row> out;
  while (true) {
    FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return out;
    if constexpr (std::is_same_v<std::invoke_result_t<Reader, const Statement&>, Row>) {
      out.push_back(read(s));
    } else {
      FT_DB_ASSIGN_OR_RETURN(Row r, read(s));
      out.push_back(std::move(r));
    }
  }
}

}  // namespace db_internal
}  // namespace fusetune

#endif  // FUSETUNE_DB_SRC_SQL_ROWS_H_
