#include "fusetune/tuner/selection.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"

namespace fusetune {
namespace {

struct Candidate {
  KernelConfig config;
  const Trial* trial;
};

// kOk trials with parseable configs, in the fixed visiting order.
std::vector<Candidate> OrderedCandidates(std::span<const Trial> trials, std::optional<Variant> variant) {
  std::vector<Candidate> out;
  for (const Trial& t : trials) {
    if (t.outcome != TrialOutcome::kOk) continue;
    absl::StatusOr<KernelConfig> c = KernelConfig::FromKey(t.config_key);
    if (!c.ok()) continue;
    if (variant.has_value() && c->variant != *variant) continue;
    out.push_back({*c, &t});
  }
  std::sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    if (ConfigOrderLess(a.config, b.config)) return true;
    if (ConfigOrderLess(b.config, a.config)) return false;
    return a.trial->trial_id < b.trial->trial_id;
  });
  return out;
}

}  // namespace

double TrialSpread(const Trial& trial) { return std::max(0.0, (trial.p90_us - trial.p10_us) / 2.0); }

bool BeatsIncumbent(const Trial& challenger, const Trial& incumbent) {
  const double noise = std::max(TrialSpread(challenger), TrialSpread(incumbent));
  return incumbent.median_us - challenger.median_us > noise;
}

std::optional<Trial> SelectBestTrial(std::span<const Trial> trials, std::optional<Variant> variant) {
  const std::vector<Candidate> candidates = OrderedCandidates(trials, variant);
  if (candidates.empty()) return std::nullopt;
  const Trial* best = candidates.front().trial;
  for (size_t i = 1; i < candidates.size(); ++i) {
    if (BeatsIncumbent(*candidates[i].trial, *best)) best = candidates[i].trial;
  }
  return *best;
}

absl::StatusOr<BestConfig> SelectBest(std::span<const Trial> trials, const std::string& device_class,
                                      int64_t run_id, const std::string& commit) {
  for (const Trial& t : trials) {
    if (t.problem_key != trials.front().problem_key) {
      return absl::InvalidArgumentError(absl::StrCat("SelectBest got trials of two problems: ",
                                                     trials.front().problem_key, " and ", t.problem_key));
    }
  }
  std::optional<Trial> best = SelectBestTrial(trials);
  if (!best.has_value()) {
    return absl::NotFoundError(absl::StrCat(
        "no successful trial for ", trials.empty() ? std::string("(no trials)") : trials.front().problem_key));
  }
  BestConfig out;
  out.device_class = device_class;
  out.problem_key = best->problem_key;
  out.config_key = best->config_key;
  out.median_us = best->median_us;
  out.p10_us = best->p10_us;
  out.p90_us = best->p90_us;
  out.max_abs_error = best->max_abs_error;
  out.max_rel_error = best->max_rel_error;
  out.run_id = run_id;
  out.commit = commit;
  out.updated_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  const std::optional<Trial> fused = SelectBestTrial(trials, Variant::kFused);
  const std::optional<Trial> partial = SelectBestTrial(trials, Variant::kPartial);
  const std::optional<Trial> materialized = SelectBestTrial(trials, Variant::kMaterialized);
  if (partial) out.best_partial_us = partial->median_us;
  if (materialized) out.best_materialized_us = materialized->median_us;
  if (fused && fused->median_us > 0) {
    if (partial) out.speedup_vs_partial = partial->median_us / fused->median_us;
    if (materialized) out.speedup_vs_materialized = materialized->median_us / fused->median_us;
  }
  return out;
}

}  // namespace fusetune
