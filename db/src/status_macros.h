// Early returns on a failed absl::Status or absl::StatusOr, for db/'s sources.
//
// Internal to db/: nothing outside this directory includes it.
#ifndef FUSETUNE_DB_SRC_STATUS_MACROS_H_
#define FUSETUNE_DB_SRC_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"

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

#endif  // FUSETUNE_DB_SRC_STATUS_MACROS_H_
