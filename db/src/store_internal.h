// What the files of the Store share: its Impl (the connection, its mutex, the transaction
// helpers), the input checks every table uses, the run-exists check and the row loop. The Store's
// methods are split by table: store.cc (open, schema, runs), trials_store.cc,
// results_store.cc (best configs, regressions, audits), bench_store.cc (bench cells) and
// jobs_store.cc (workers, jobs).
//
// Internal to db/: nothing outside this directory includes it.

#ifndef FUSETUNE_DB_SRC_STORE_INTERNAL_H_
#define FUSETUNE_DB_SRC_STORE_INTERNAL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "fusetune/db/store.h"
#include "sqlite.h"

// Returns early with the error of a StatusOr expression, else assigns its value.
#define FT_DB_CONCAT_INNER(a, b) a##b
#define FT_DB_CONCAT(a, b) FT_DB_CONCAT_INNER(a, b)
#define FT_DB_ASSIGN_OR_RETURN(lhs, expr) \
  FT_DB_ASSIGN_OR_RETURN_IMPL(FT_DB_CONCAT(_statusor_, __LINE__), lhs, expr)
#define FT_DB_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(*tmp)
#define FT_DB_RETURN_IF_ERROR(expr) \
  do {                              \
    absl::Status _st = (expr);      \
    if (!_st.ok()) return _st;      \
  } while (0)

namespace fusetune {

// One connection guarded by one mutex: every Store method holds `mu` while it uses `conn`.
class Store::Impl {
 public:
  Impl(std::unique_ptr<db_internal::Connection> c, StoreAccess a) : access(a), conn(std::move(c)) {}

  const StoreAccess access;
  absl::Mutex mu;
  std::unique_ptr<db_internal::Connection> conn ABSL_GUARDED_BY(mu);

  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT. IMMEDIATE takes the write lock up front
  // (waiting up to the busy timeout), so two processes never deadlock by both upgrading a
  // read transaction. Any error rolls the whole transaction back. PermissionDenied, before
  // any SQL, on a read-only Store.
  absl::Status WriteTransaction(const std::function<absl::Status(db_internal::Connection&)>& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // A read transaction: several SELECTs see one consistent snapshot (WAL readers never
  // block writers or other readers).
  absl::Status ReadTransaction(const std::function<absl::Status(db_internal::Connection&)>& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
};

namespace db_internal {

// ---- validation (bad input -> InvalidArgument before any SQL runs)

// InvalidArgument "<what> must not be empty" when `value` is empty.
absl::Status RequireNonEmpty(std::string_view value, std::string_view what);
// InvalidArgument "<what> must be positive, got <id>" when `id` <= 0.
absl::Status RequirePositiveId(int64_t id, std::string_view what);
// Upper bound on any list a caller can ask for: keeps one call's memory bounded.
inline constexpr int kMaxListLimit = 100000;

// InvalidArgument unless `limit` is in [1, kMaxListLimit].
absl::Status RequireLimit(int limit);

// InvalidArgument "<what> block <i>: ..." unless every block has samples >= 0, device states
// with non-negative clock and power, and a finite median_us that is >= 0 (or > 0 when
// `require_positive_median`: a bench cell's block always timed something).
absl::Status ValidateBlocks(const std::vector<SampleBlock>& blocks, std::string_view what,
                            bool require_positive_median);

// ---- JSON columns (defined in trials_store.cc; db/README.md lists the keys)

// A list of samples; NaN is written as null and read back as NaN.
std::string SamplesToJson(const std::vector<double>& samples);
absl::StatusOr<std::vector<double>> SamplesFromJson(const std::string& text);  // DataLoss if malformed
// Timing blocks with the device state read around each.
std::string BlocksToJson(const std::vector<SampleBlock>& blocks);
absl::StatusOr<std::vector<SampleBlock>> BlocksFromJson(const std::string& text);  // DataLoss if malformed

// ---- runs (defined in store.cc)

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

#endif  // FUSETUNE_DB_SRC_STORE_INTERNAL_H_
