#include "fusetune/records/regression.h"

#include <algorithm>
#include <cmath>

#include "fusetune/base/strings.h"

namespace fusetune {

absl::Status ValidateRegression(const Regression& r) {
  const std::pair<const std::string*, std::string_view> required[] = {
      {&r.commit, "commit"},           {&r.baseline_commit, "baseline_commit"}, {&r.device_class, "device_class"},
      {&r.problem_key, "problem_key"}, {&r.config_key, "config_key"},           {&r.metric, "metric"},
  };
  for (const auto& [value, name] : required) {
    if (value->empty()) return absl::InvalidArgumentError(Cat(name, " must not be empty"));
  }
  if (std::find(kRegressionVerdicts.begin(), kRegressionVerdicts.end(), r.verdict) == kRegressionVerdicts.end()) {
    std::string names;
    for (std::string_view v : kRegressionVerdicts) names = Cat(names, names.empty() ? "" : ", ", v);
    return absl::InvalidArgumentError(Cat("verdict must be one of ", names, ", got '", r.verdict, "'"));
  }
  if (!std::isfinite(r.ratio) || r.ratio < 0) {
    return absl::InvalidArgumentError(Cat("ratio must be finite and >= 0, got ", r.ratio));
  }
  if (!(r.p_value >= 0 && r.p_value <= 1)) {
    return absl::InvalidArgumentError(Cat("p_value must be in [0, 1], got ", r.p_value));
  }
  if (r.created_unix_ms < 0) return absl::InvalidArgumentError("created_unix_ms must be >= 0");
  return absl::OkStatus();
}

}  // namespace fusetune
