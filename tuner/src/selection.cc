#include "fusetune/tuner/selection.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "internal.h"

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

// Largest k with P(Binomial(n, 1/2) < k) <= alpha: [x_(k), x_(n+1-k)] (1-based) covers the
// median with probability >= 1 - 2 alpha. 0 when n is too small for that.
int MedianIntervalRank(int n, double alpha) {
  double p = std::pow(0.5, n), cumulative = 0;
  int k = 0;
  for (int j = 0; j < n; ++j) {
    cumulative += p;  // P(B <= j)
    if (cumulative > alpha) break;
    k = j + 1;
    p = p * static_cast<double>(n - j) / static_cast<double>(j + 1);
  }
  return k;
}

bool IsRoundTrial(const Trial& t) { return t.stage == TrialStage::kFinal || t.stage == TrialStage::kAudit; }

// The final-round trials the pick is made from: the kOk kFinal trials of the highest
// attempt (an earlier attempt is a set interrupted while being recorded, measured again).
std::vector<Trial> LatestFinalSet(std::span<const Trial> trials) {
  int attempt = -1;
  for (const Trial& t : trials) {
    if (t.stage == TrialStage::kFinal && t.outcome == TrialOutcome::kOk) attempt = std::max(attempt, t.attempt);
  }
  std::vector<Trial> out;
  for (const Trial& t : trials) {
    if (t.stage == TrialStage::kFinal && t.outcome == TrialOutcome::kOk && t.attempt == attempt) out.push_back(t);
  }
  return out;
}

std::vector<Trial> ScreenTrials(std::span<const Trial> trials) {
  std::vector<Trial> out;
  for (const Trial& t : trials) {
    if (t.stage == TrialStage::kScreen) out.push_back(t);
  }
  return out;
}

}  // namespace

absl::StatusOr<RoundRatio> CompareRounds(const Trial& a, const Trial& b) {
  if (a.outcome != TrialOutcome::kOk || b.outcome != TrialOutcome::kOk) {
    return absl::InvalidArgumentError("CompareRounds needs two kOk trials");
  }
  if (a.samples_us.empty() || a.samples_us.size() != b.samples_us.size()) {
    return absl::InvalidArgumentError(absl::StrCat("CompareRounds needs trials of the same rounds; got ",
                                                   a.samples_us.size(), " and ", b.samples_us.size()));
  }
  std::vector<double> ratios;
  for (size_t i = 0; i < a.samples_us.size(); ++i) {
    if (!(b.samples_us[i] > 0) || !(a.samples_us[i] >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat("round ", i + 1, " has a non-positive time"));
    }
    ratios.push_back(a.samples_us[i] / b.samples_us[i]);
  }
  std::sort(ratios.begin(), ratios.end());
  RoundRatio r;
  r.rounds = static_cast<int>(ratios.size());
  const size_t n = ratios.size();
  r.median = n % 2 == 1 ? ratios[n / 2] : 0.5 * (ratios[n / 2 - 1] + ratios[n / 2]);
  const int k = MedianIntervalRank(static_cast<int>(n), 0.05);
  r.low = k == 0 ? ratios.front() : ratios[static_cast<size_t>(k - 1)];
  r.high = k == 0 ? ratios.back() : ratios[n - static_cast<size_t>(k)];
  return r;
}

std::optional<Trial> SelectBestOfRounds(std::span<const Trial> trials, std::optional<Variant> variant) {
  const std::vector<Candidate> candidates = OrderedCandidates(trials, variant);
  if (candidates.empty()) return std::nullopt;
  const Trial* best = candidates.front().trial;
  for (size_t i = 1; i < candidates.size(); ++i) {
    absl::StatusOr<RoundRatio> r = CompareRounds(*candidates[i].trial, *best);
    if (r.ok() && r->median < 1.0 && r->high < 1.0) best = candidates[i].trial;
  }
  return *best;
}

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
  // Per variant: the interleaved final rounds decide where they ran; otherwise the screen.
  const std::vector<Trial> finals = LatestFinalSet(trials);
  const std::vector<Trial> screens = ScreenTrials(trials);
  auto best_of = [&](Variant v) -> std::optional<Trial> {
    std::optional<Trial> from_rounds = SelectBestOfRounds(finals, v);
    if (from_rounds.has_value()) return from_rounds;
    return SelectBestTrial(screens, v);
  };
  const std::optional<Trial> fused = best_of(Variant::kFused);
  const std::optional<Trial> partial = best_of(Variant::kPartial);
  const std::optional<Trial> materialized = best_of(Variant::kMaterialized);
  std::vector<Trial> leaders;
  for (const std::optional<Trial>* t : {&fused, &partial, &materialized}) {
    if (t->has_value()) leaders.push_back(**t);
  }
  const bool all_rounds = !leaders.empty() && std::all_of(leaders.begin(), leaders.end(), IsRoundTrial);
  std::optional<Trial> best = all_rounds ? SelectBestOfRounds(leaders) : SelectBestTrial(leaders);
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
  out.updated_unix_ms = NowUnixMs();
  if (partial) out.best_partial_us = partial->median_us;
  if (materialized) out.best_materialized_us = materialized->median_us;
  // Baseline over fused: the median per-round ratio when both ran in the same rounds (a
  // fair comparison on a GPU whose clock depends on what ran before), else the medians'.
  auto speedup = [&fused](const std::optional<Trial>& baseline) -> double {
    if (!fused || !baseline || !(fused->median_us > 0)) return 0;
    if (IsRoundTrial(*fused) && IsRoundTrial(*baseline)) {
      absl::StatusOr<RoundRatio> r = CompareRounds(*baseline, *fused);
      if (r.ok()) return r->median;
    }
    return baseline->median_us / fused->median_us;
  };
  out.speedup_vs_partial = speedup(partial);
  out.speedup_vs_materialized = speedup(materialized);
  return out;
}

}  // namespace fusetune
