#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "fusetune/base/time.h"
#include "fusetune/db/store.h"
#include "sqlite.h"
#include "store_internal.h"

// The change_points table: the change points last detected in each cell's history.

namespace fusetune {

using db_internal::Connection;
using db_internal::ReadRows;
using db_internal::RequireLimit;
using db_internal::RequireNonEmpty;
using db_internal::Statement;

namespace {

// Fills the row's identity from the cell and checks it (InvalidArgument naming the row).
absl::Status CompleteChangePoint(const ChangePointRow& cell, size_t index, ChangePointRow& row) {
  const std::string what = absl::StrCat("change point ", index);
  for (auto [field, value] : {std::pair<std::string*, const std::string*>{&row.device_class, &cell.device_class},
                              {&row.suite, &cell.suite},
                              {&row.problem_key, &cell.problem_key},
                              {&row.config_key, &cell.config_key}}) {
    if (field->empty()) *field = *value;
    if (*field != *value) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " belongs to '", *field, "', not to the cell's '", *value, "'"));
    }
  }
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(row.commit, what + " commit"));
  if (row.position < 0) return absl::InvalidArgumentError(what + " position must be >= 0");
  for (const auto& [name, value] : {std::pair<const char*, double>{"mean_before_us", row.mean_before_us},
                                    {"mean_after_us", row.mean_after_us},
                                    {"ratio", row.ratio}}) {
    if (!std::isfinite(value) || value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, " ", name, " must be finite and > 0, got ", value));
    }
  }
  if (!(row.p_value >= 0 && row.p_value <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " p_value must be in [0, 1], got ", row.p_value));
  }
  if (row.direction != "slower" && row.direction != "faster") {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " direction must be 'slower' or 'faster', got '", row.direction, "'"));
  }
  if (row.detected_unix_ms < 0) return absl::InvalidArgumentError(what + " detected_unix_ms must be >= 0");
  return absl::OkStatus();
}

ChangePointRow ReadChangePoint(const Statement& s) {
  ChangePointRow r;
  r.device_class = s.Text(0);
  r.suite = s.Text(1);
  r.problem_key = s.Text(2);
  r.config_key = s.Text(3);
  r.commit = s.Text(4);
  r.position = s.Int64(5);
  r.mean_before_us = s.Double(6);
  r.mean_after_us = s.Double(7);
  r.ratio = s.Double(8);
  r.p_value = s.Double(9);
  r.direction = s.Text(10);
  r.detected_unix_ms = s.Int64(11);
  return r;
}

}  // namespace

absl::Status Store::ReplaceChangePoints(std::string_view device_class, std::string_view suite,
                                        std::string_view problem_key, std::string_view config_key,
                                        const std::vector<ChangePointRow>& rows) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(device_class, "device_class"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(suite, "suite"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(problem_key, "problem_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(config_key, "config_key"));
  ChangePointRow cell;
  cell.device_class = std::string(device_class);
  cell.suite = std::string(suite);
  cell.problem_key = std::string(problem_key);
  cell.config_key = std::string(config_key);
  std::vector<ChangePointRow> complete = rows;
  std::set<int64_t> positions;
  for (size_t i = 0; i < complete.size(); ++i) {
    FT_DB_RETURN_IF_ERROR(CompleteChangePoint(cell, i, complete[i]));
    if (!positions.insert(complete[i].position).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("change point ", i, ": two change points at position ", complete[i].position));
    }
  }
  absl::MutexLock lock(&impl_->mu);
  return impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(Statement clear,
                           c.Prepare("DELETE FROM change_points WHERE device_class = ?1 AND suite = ?2 AND "
                                     "problem_key = ?3 AND config_key = ?4"));
    clear.Bind(1, device_class).Bind(2, suite).Bind(3, problem_key).Bind(4, config_key);
    FT_DB_RETURN_IF_ERROR(clear.Run());
    const int64_t now = NowUnixMs();
    for (const ChangePointRow& r : complete) {
      FT_DB_ASSIGN_OR_RETURN(
          Statement s,
          c.Prepare("INSERT INTO change_points (device_class, suite, problem_key, config_key, commit_hash, "
                    "position, mean_before_us, mean_after_us, ratio, p_value, direction, detected_unix_ms) "
                    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"));
      s.Bind(1, r.device_class)
          .Bind(2, r.suite)
          .Bind(3, r.problem_key)
          .Bind(4, r.config_key)
          .Bind(5, r.commit)
          .Bind(6, r.position)
          .Bind(7, r.mean_before_us)
          .Bind(8, r.mean_after_us)
          .Bind(9, r.ratio)
          .Bind(10, r.p_value)
          .Bind(11, r.direction)
          .Bind(12, r.detected_unix_ms != 0 ? r.detected_unix_ms : now);
      FT_DB_RETURN_IF_ERROR(s.Run());
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<ChangePointRow>> Store::ListChangePoints(const ChangePointFilter& filter, int limit) {
  FT_DB_RETURN_IF_ERROR(RequireLimit(limit));
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(
      Statement s,
      impl_->conn->Prepare("SELECT device_class, suite, problem_key, config_key, commit_hash, position, "
                           "mean_before_us, mean_after_us, ratio, p_value, direction, detected_unix_ms "
                           "FROM change_points WHERE (?1 = '' OR device_class = ?1) AND (?2 = '' OR suite = ?2) "
                           "AND (?3 = '' OR problem_key = ?3) AND (?4 = '' OR config_key = ?4) "
                           "AND (?5 = '' OR commit_hash = ?5) "
                           "ORDER BY detected_unix_ms DESC, device_class, suite, problem_key, config_key, "
                           "position LIMIT ?6"));
  s.Bind(1, filter.device_class)
      .Bind(2, filter.suite)
      .Bind(3, filter.problem_key)
      .Bind(4, filter.config_key)
      .Bind(5, filter.commit)
      .Bind(6, limit);
  return ReadRows<ChangePointRow>(s, ReadChangePoint);
}

}  // namespace fusetune
