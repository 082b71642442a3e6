// Regression records: the verdict of one regression check of a (problem, config) cell, and
// the one list of verdict names.
//
// Thread-safety: plain value types and pure functions.
#ifndef FUSETUNE_RECORDS_REGRESSION_H_
#define FUSETUNE_RECORDS_REGRESSION_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace fusetune {

// The verdicts a Regression can carry: the one list of them (the store refuses others).
inline constexpr std::array<std::string_view, 4> kRegressionVerdicts = {"regressed", "improved", "same", "unknown"};

// Verdict of one regression check.
struct Regression {
  int64_t id = 0;
  std::string commit;
  std::string baseline_commit;
  std::string device_class;
  std::string problem_key;
  std::string config_key;
  std::string metric;        // "latency" or "max_rel_error"
  double ratio = 0;          // new / baseline (dimensionless; latency: > 1 is slower); finite, >= 0
  double p_value = 1;        // after the suite's multiple-comparison correction; in [0, 1]
  std::string verdict;       // one of kRegressionVerdicts
  int64_t created_unix_ms = 0;  // Unix milliseconds; 0 on write = now
};

// The rules every stored Regression meets (the store and the service check them):
// InvalidArgument naming the field for an empty commit, baseline commit, device class,
// problem key, config key or metric, a verdict outside kRegressionVerdicts, a non-finite or
// negative ratio, a p-value outside [0, 1] (or NaN) or a negative created_unix_ms.
absl::Status ValidateRegression(const Regression& r);

}  // namespace fusetune

#endif  // FUSETUNE_RECORDS_REGRESSION_H_
