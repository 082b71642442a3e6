// Selection: the best config of a problem from its trials, tie-aware and deterministic.
//
// Rule (SelectBestTrial): only kOk trials count. They are visited in ConfigOrderLess order
// of their configs (then by trial id), so the input order never matters. The first is the
// incumbent; a challenger replaces it only when
//     incumbent.median - challenger.median > max(spread(incumbent), spread(challenger))
// with spread(t) = (t.p90 - t.p10) / 2, i.e. only when it is faster by more than the noise
// either of them showed. Within the noise the incumbent stays, so ties go to the config
// that comes first in ConfigOrderLess (fused before partial before materialized, then
// precision, block_m, block_s, threads, stages).
//
// Rule (SelectBestOfRounds), for trials measured in the same interleaved rounds: the same
// visiting order; a challenger replaces the incumbent only when the rounds agree it is
// faster (per-round ratio challenger/incumbent: median < 1 and its 90 % interval below 1).
//
// SelectBest uses the interleaved final rounds where a sweep ran them (for each variant,
// the latest set of kFinal trials), the screen trials otherwise.
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_TUNER_SELECTION_H_
#define FUSETUNE_TUNER_SELECTION_H_

#include <optional>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "fusetune/kernels/config.h"
#include "fusetune/records/trial.h"
#include "fusetune/records/run.h"

namespace fusetune {

// Half the p10..p90 range: the noise a trial's median is compared against.
double TrialSpread(const Trial& trial);

// True when `challenger` beats `incumbent` by the rule above (both must be kOk).
bool BeatsIncumbent(const Trial& challenger, const Trial& incumbent);

// The best kOk trial among `trials` (optionally only those of one variant, judged by the
// config key's variant). nullopt when there is none. Trials whose config key does not
// parse are ignored.
std::optional<Trial> SelectBestTrial(std::span<const Trial> trials,
                                     std::optional<Variant> variant = std::nullopt);

// Two trials measured in the same interleaved rounds (samples_us paired by index), as the
// distribution of the per-round ratios a_i / b_i.
struct RoundRatio {
  double median = 0;   // median of a_i / b_i
  double low = 0;      // 90 % confidence interval of that median (order statistics; the
  double high = 0;     //   whole range when there are too few rounds for 90 %)
  int rounds = 0;
};
// InvalidArgument when either trial is not kOk or the two have different numbers of rounds
// (or none).
absl::StatusOr<RoundRatio> CompareRounds(const Trial& a, const Trial& b);

// The best among trials of the same interleaved rounds (final-stage trials), optionally of
// one variant. Visited in ConfigOrderLess order; a challenger replaces the incumbent only
// when its per-round ratio to the incumbent has median < 1 and a confidence interval that
// lies below 1 (faster in a way the rounds agree on); so a config within the noise of the
// first in ConfigOrderLess never displaces it, and two tunes of one problem agree.
std::optional<Trial> SelectBestOfRounds(std::span<const Trial> trials,
                                        std::optional<Variant> variant = std::nullopt);

// The BestConfig of one problem: per variant the best final-round trial (SelectBestOfRounds
// over the latest kFinal set) or, for a variant without one, the best screen trial
// (SelectBestTrial); the best of those over all variants; and the best fused trial's
// speedup over the best materialized and the best partial trial (baseline / fused: the
// median per-round ratio when both ran in the final rounds, else the ratio of medians; 0
// when either side has no kOk trial). Halving-rung trials are not used. NotFound when no trial is kOk.
// InvalidArgument when the trials are of more than one problem.
absl::StatusOr<BestConfig> SelectBest(std::span<const Trial> trials, const std::string& device_class,
                                      int64_t run_id, const std::string& commit);

}  // namespace fusetune

#endif  // FUSETUNE_TUNER_SELECTION_H_
