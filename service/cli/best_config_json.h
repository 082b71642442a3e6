// The one JSON form of a best config: `best --json`, `best --server --json` and every row of
// `report --json` print it (report adds the row's "audit").
//
// Fields: device_class, problem, config, median_us, p10_us, p90_us, tflops,
// speedup_vs_materialized, speedup_vs_partial, best_materialized_us, best_partial_us,
// max_abs_error, max_rel_error, run_id, commit. A service's answer (`best --server`) adds
// provenance ("exact", "nearest" or "default"), source_problem (the tuned problem the answer
// came from, "" for default) and distance; the fields a GetBestConfig answer does not carry
// (p10_us, p90_us, speedup_vs_partial, best_materialized_us, best_partial_us, max_abs_error)
// are then null, and median_us and tflops are those of the source problem.
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_SERVICE_CLI_BEST_CONFIG_JSON_H_
#define FUSETUNE_SERVICE_CLI_BEST_CONFIG_JSON_H_

#include <optional>
#include <string>

#include "fusetune/records/run.h"
#include "nlohmann/json.hpp"

namespace fusetune::cli {

// Where a service's answer came from (GetBestConfigResponse's provenance, source and distance).
struct BestConfigProvenance {
  std::string answer;          // "exact", "nearest" or "default" (ConfigProvenanceName)
  std::string source_problem;  // the tuned problem the answer came from; "" for default
  double distance = 0;         // nearest-shape distance; 0 for exact and default
};

// TFLOP/s of `best` from the documented FLOP count of the problem whose latency median_us
// is (`problem_key`); 0 when the key cannot be rebuilt (varlen/padded problems are keyed by a
// hash of their lengths) or there is no latency.
double BestConfigTflops(const std::string& problem_key, double median_us);

// The JSON object above; `provenance` only for a service's answer.
nlohmann::json BestConfigJson(const BestConfig& best,
                              const std::optional<BestConfigProvenance>& provenance = std::nullopt);

}  // namespace fusetune::cli

#endif  // FUSETUNE_SERVICE_CLI_BEST_CONFIG_JSON_H_
