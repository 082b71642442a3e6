#include "best_config_json.h"

#include "absl/status/statusor.h"
#include "fusetune/kernels/problem.h"

namespace fusetune::cli {

double BestConfigTflops(const std::string& problem_key, double median_us) {
  absl::StatusOr<AttentionProblem> p = AttentionProblem::FromKey(problem_key);
  if (!p.ok() || median_us <= 0) return 0;
  return p->Flops() / (median_us * 1e-6) / 1e12;
}

nlohmann::json BestConfigJson(const BestConfig& best, const std::optional<BestConfigProvenance>& provenance) {
  // A service's latency was measured on its source problem, not the one asked for.
  const std::string& measured_problem =
      provenance.has_value() && !provenance->source_problem.empty() ? provenance->source_problem : best.problem_key;
  nlohmann::json j = {{"device_class", best.device_class},
                      {"problem", best.problem_key},
                      {"config", best.config_key},
                      {"median_us", best.median_us},
                      {"p10_us", best.p10_us},
                      {"p90_us", best.p90_us},
                      {"tflops", BestConfigTflops(measured_problem, best.median_us)},
                      {"speedup_vs_materialized", best.speedup_vs_materialized},
                      {"speedup_vs_partial", best.speedup_vs_partial},
                      {"best_materialized_us", best.best_materialized_us},
                      {"best_partial_us", best.best_partial_us},
                      {"max_abs_error", best.max_abs_error},
                      {"max_rel_error", best.max_rel_error},
                      {"run_id", best.run_id},
                      {"commit", best.commit}};
  if (provenance.has_value()) {
    j["provenance"] = provenance->answer;
    j["source_problem"] = provenance->source_problem;
    j["distance"] = provenance->distance;
    // Not in a GetBestConfig answer: null, not a made-up 0.
    for (const char* field :
         {"p10_us", "p90_us", "speedup_vs_partial", "best_materialized_us", "best_partial_us", "max_abs_error"}) {
      j[field] = nullptr;
    }
  }
  return j;
}

}  // namespace fusetune::cli
