#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "fusetune/base/time.h"
#include "fusetune/db/store.h"
#include "sql.h"
#include "sql_rows.h"
#include "sql_store.h"

// The change_points table: the change points last detected in each cell's history.

namespace fusetune::db_internal {

namespace {

ChangePointRow ReadChangePoint(const Statement& s) {
  ChangePointRow r;
  s.ReadColumns(0, &r.device_class, &r.suite, &r.problem_key, &r.config_key, &r.commit, &r.position,
                &r.mean_before_us, &r.mean_after_us, &r.ratio, &r.p_value, &r.direction, &r.detected_unix_ms);
  return r;
}

}  // namespace

absl::Status SqlStore::ReplaceChangePoints(std::string_view device_class, std::string_view suite,
                                        std::string_view problem_key, std::string_view config_key,
                                        const std::vector<ChangePointRow>& rows) {
  FT_DB_ASSIGN_OR_RETURN(const std::vector<ChangePointRow> complete,
                         CompleteChangePoints(device_class, suite, problem_key, config_key, rows));
  absl::MutexLock lock(&mu_);
  return WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(Statement clear,
                           c.Prepare("DELETE FROM change_points WHERE device_class = ?1 AND suite = ?2 AND "
                                     "problem_key = ?3 AND config_key = ?4"));
    clear.BindAll(device_class, suite, problem_key, config_key);
    FT_DB_RETURN_IF_ERROR(clear.Run());
    const int64_t now = NowUnixMs();
    for (const ChangePointRow& r : complete) {
      FT_DB_ASSIGN_OR_RETURN(
          Statement s,
          c.Prepare("INSERT INTO change_points (device_class, suite, problem_key, config_key, commit_hash, "
                    "position, mean_before_us, mean_after_us, ratio, p_value, direction, detected_unix_ms) "
                    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"));
      s.BindAll(r.device_class, r.suite, r.problem_key, r.config_key, r.commit, r.position, r.mean_before_us,
                r.mean_after_us, r.ratio, r.p_value, r.direction,
                r.detected_unix_ms != 0 ? r.detected_unix_ms : now);
      FT_DB_RETURN_IF_ERROR(s.Run());
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<ChangePointRow>> SqlStore::ListChangePoints(const ChangePointFilter& filter, int limit) {
  FT_DB_RETURN_IF_ERROR(RequireLimit(limit));
  return SelectRows<ChangePointRow>(
      "SELECT device_class, suite, problem_key, config_key, commit_hash, position, mean_before_us, mean_after_us, "
      "ratio, p_value, direction, detected_unix_ms FROM change_points "
      "WHERE (?1 = '' OR device_class = ?1) AND (?2 = '' OR suite = ?2) AND (?3 = '' OR problem_key = ?3) "
      "AND (?4 = '' OR config_key = ?4) AND (?5 = '' OR commit_hash = ?5) "
      "ORDER BY detected_unix_ms DESC, device_class, suite, problem_key, config_key, position LIMIT ?6",
      ReadChangePoint, filter.device_class, filter.suite, filter.problem_key, filter.config_key, filter.commit, limit);
}

}  // namespace fusetune::db_internal
