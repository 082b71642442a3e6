#include "fusetune/regress/verdict.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fusetune/records/regression.h"

namespace fusetune::regress {
namespace {

absl::Status ValidateOptions(const VerdictOptions& o) {
  if (!(o.alpha > 0 && o.alpha < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("alpha ", o.alpha, " outside (0, 1)"));
  }
  if (!(o.confidence > 0 && o.confidence < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("confidence ", o.confidence, " outside (0, 1)"));
  }
  if (!(o.min_floor >= 0 && std::isfinite(o.min_floor)) ||
      !(o.noise_multiplier >= 0 && std::isfinite(o.noise_multiplier))) {
    return absl::InvalidArgumentError("min_floor and noise_multiplier must be finite and >= 0");
  }
  if (!(o.max_floor >= o.min_floor && std::isfinite(o.max_floor))) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_floor ", o.max_floor, " must be finite and >= min_floor ", o.min_floor));
  }
  if (o.calibrated_min_floor &&
      !(*o.calibrated_min_floor >= 0 && *o.calibrated_min_floor <= o.max_floor)) {
    return absl::InvalidArgumentError(absl::StrCat("calibrated_min_floor ", *o.calibrated_min_floor,
                                                   " must be in [0, max_floor ", o.max_floor, "]"));
  }
  if (o.min_calibrations < 1) {
    return absl::InvalidArgumentError(absl::StrCat("min_calibrations ", o.min_calibrations, " < 1"));
  }
  if (!(o.max_interval_floors > 0 && std::isfinite(o.max_interval_floors))) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_interval_floors ", o.max_interval_floors, " must be finite and > 0"));
  }
  if (o.max_blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_blocks ", o.max_blocks, " < 1"));
  }
  return absl::OkStatus();
}

absl::Status ValidateCell(const CellInput& cell) {
  const std::string name = absl::StrCat(cell.problem_key, " ", cell.config_key);
  if (absl::Status s = ValidateSample(cell.baseline, "baseline"); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", s.message()));
  }
  if (absl::Status s = ValidateSample(cell.candidate, "candidate"); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", s.message()));
  }
  if (cell.paired && cell.baseline.size() != cell.candidate.size()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": paired blocks need equal counts, not ",
                                                   cell.baseline.size(), " and ", cell.candidate.size()));
  }
  if (!(cell.aa_noise >= 0 && std::isfinite(cell.aa_noise)) ||
      !(cell.calibrated_noise >= 0 && std::isfinite(cell.calibrated_noise))) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": aa_noise ", cell.aa_noise, " and calibrated_noise ",
                                                   cell.calibrated_noise, " must be finite and >= 0"));
  }
  if (cell.calibrations < 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": calibrations ", cell.calibrations, " < 0"));
  }
  if (cell.accuracy) {
    const AccuracyInput& a = *cell.accuracy;
    if (!(a.tolerance > 0 && std::isfinite(a.tolerance)) ||
        !(a.baseline_error >= 0 && std::isfinite(a.baseline_error)) ||
        !(a.candidate_error >= 0 || std::isnan(a.candidate_error)) ||
        !(a.growth_limit >= 1 && std::isfinite(a.growth_limit))) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": accuracy needs tolerance > 0, errors >= 0 (the candidate's may be NaN) and "
                "growth_limit >= 1"));
    }
  }
  return absl::OkStatus();
}

AccuracyVerdict JudgeAccuracy(const std::optional<AccuracyInput>& input) {
  AccuracyVerdict v;
  if (!input) return v;
  v.checked = true;
  const AccuracyInput& a = *input;
  v.growth = a.baseline_error > 0 ? a.candidate_error / a.baseline_error
                                  : (a.candidate_error > 0 ? std::numeric_limits<double>::infinity() : 1.0);
  // NaN compares false: a NaN error fails.
  v.failed = !(a.candidate_error <= a.tolerance);
  v.grew = !v.failed && v.growth > a.growth_limit;
  return v;
}

absl::StatusOr<std::vector<double>> Adjust(const std::vector<double>& p, Correction correction) {
  switch (correction) {
    case Correction::kNone:
      return p;
    case Correction::kHolm:
      return HolmAdjust(p);
    case Correction::kBenjaminiHochberg:
      return BenjaminiHochbergAdjust(p);
  }
  return absl::InvalidArgumentError("unknown correction");
}

// What set the cell's floor, for the reasons of verdicts: "the minimum 1.50%", "3 x the
// blocks' A/A noise 2.10%" or "3 x the calibrated between-process noise 4.00%".
std::string FloorSource(const CellInput& cell, const VerdictOptions& options) {
  const double noise = std::max(cell.aa_noise, cell.calibrated_noise);
  const double minimum = MinimumFloor(cell, options);
  if (options.noise_multiplier * noise <= minimum) {
    if (minimum != options.min_floor) {
      return absl::StrFormat("the minimum %.2f%% of a cell with %d calibrations", 100 * minimum, cell.calibrations);
    }
    return absl::StrFormat("the minimum %.2f%%", 100 * minimum);
  }
  return absl::StrFormat("%g x the %s %.2f%%", options.noise_multiplier,
                         cell.calibrated_noise >= cell.aa_noise ? "calibrated between-process noise"
                                                                : "blocks' A/A noise",
                         100 * noise);
}

// The blocks a side an undecided cell's interval needs to fit inside its floor: the interval's
// half-width h shrinks as 1 / sqrt(n), so n (h / m)^2 with a quarter to spare, where m is the
// room between the point ratio and the floor's nearer edge (log scale); at least a quarter more
// blocks than now and at most four times as many. Double when there is no room (the point ratio
// on or past the floor, where only the test can still decide) or no finite interval.
int SuggestedBlocks(const CellVerdict& v, int blocks) {
  const double half_width = 0.5 * (std::log(v.ratio.upper) - std::log(v.ratio.lower));
  const double room = std::log1p(v.floor) - std::abs(std::log(v.ratio.pairwise_ratio));
  if (!(room > 0) || !std::isfinite(half_width) || !(half_width > 0)) return 2 * blocks;
  const double needed = std::ceil(1.25 * blocks * (half_width / room) * (half_width / room));
  const int at_least = blocks + std::max(1, (blocks + 3) / 4);
  return static_cast<int>(std::clamp(needed, static_cast<double>(at_least), 4.0 * blocks));
}

// Appends |x - median(values)| for each x of `values` (the median absolute deviation's terms).
void AppendAbsDeviations(const std::vector<double>& values, std::vector<double>& deviations) {
  const double centre = Median(values);
  for (double x : values) deviations.push_back(std::abs(x - centre));
}

// Marks `v` unknown and, below the block cap when `more_blocks_help`, asks for more blocks.
void Undecided(const VerdictOptions& options, bool more_blocks_help, CellVerdict& v) {
  v.verdict = Verdict::kUnknown;
  const int blocks = std::max(v.baseline_blocks, v.candidate_blocks);
  v.remeasure = more_blocks_help && blocks < options.max_blocks;
  v.suggested_blocks = v.remeasure ? std::min(options.max_blocks, SuggestedBlocks(v, blocks)) : blocks;
}

// A cell's test and estimate, before the adjustment across the suite.
struct CellStatistics {
  double p_slower = 1;
  double p_faster = 1;
  bool exact = false;
  RatioEstimate ratio;
};

// Unpaired cells: the Mann–Whitney test each way and the ratio of medians with Moses' interval.
absl::StatusOr<CellStatistics> UnpairedStatistics(const CellInput& cell, const VerdictOptions& options) {
  absl::StatusOr<RankTestResult> slower = MannWhitneySlower(cell.baseline, cell.candidate);
  if (!slower.ok()) return slower.status();
  absl::StatusOr<RankTestResult> faster = MannWhitneySlower(cell.candidate, cell.baseline);
  if (!faster.ok()) return faster.status();
  absl::StatusOr<RatioEstimate> ratio = RatioOfMedians(cell.baseline, cell.candidate, options.confidence);
  if (!ratio.ok()) return ratio.status();
  return CellStatistics{slower->p_value, faster->p_value, slower->exact, *ratio};
}

// Paired cells: the signed-rank test of the per-round log ratios each way and their
// Walsh-average estimate with Tukey's interval.
absl::StatusOr<CellStatistics> PairedStatistics(const CellInput& cell, const VerdictOptions& options) {
  const std::vector<double> up = PairedLogRatios(cell.baseline, cell.candidate);
  std::vector<double> down;
  for (double d : up) down.push_back(-d);
  absl::StatusOr<SignedRankTestResult> slower = WilcoxonSignedRankAbove(up);
  if (!slower.ok()) return slower.status();
  absl::StatusOr<SignedRankTestResult> faster = WilcoxonSignedRankAbove(down);
  if (!faster.ok()) return faster.status();
  absl::StatusOr<RatioEstimate> ratio = PairedRatio(cell.baseline, cell.candidate, options.confidence);
  if (!ratio.ok()) return ratio.status();
  return CellStatistics{slower->p_value, faster->p_value, slower->exact, *ratio};
}

// Applies the rule of verdict.h to a cell whose statistics and adjusted p-values are filled.
void Decide(const CellInput& cell, const VerdictOptions& options, CellVerdict& v) {
  const double hi = 1 + v.floor, lo = 1 / (1 + v.floor);
  const double r = v.ratio.pairwise_ratio;
  const std::string numbers = absl::StrFormat(
      "ratio %.4f [%.4f, %.4f], floor %.2f%%, p(slower) %.3g adj %.3g, p(faster) %.3g adj %.3g, "
      "%d+%d blocks%s",
      r, v.ratio.lower, v.ratio.upper, 100 * v.floor, v.p_slower, v.p_slower_adjusted,
      v.p_faster, v.p_faster_adjusted, v.baseline_blocks, v.candidate_blocks, v.paired ? " paired by round" : "");
  // (A zero floor has no width to compare with.)
  const bool wide =
      v.floor > 0 && std::log(v.ratio.upper / v.ratio.lower) > options.max_interval_floors * std::log(hi);
  if (!wide && v.p_slower_adjusted < options.alpha && r > hi) {
    v.verdict = Verdict::kRegressed;
    v.why = absl::StrCat("slower beyond the floor: ", numbers);
  } else if (!wide && v.p_faster_adjusted < options.alpha && r < lo) {
    v.verdict = Verdict::kImproved;
    v.why = absl::StrCat("faster beyond the floor: ", numbers);
  } else if (v.floor > options.max_floor) {
    // More blocks narrow only the blocks' part of the floor.
    const bool more_blocks_help =
        std::max(MinimumFloor(cell, options), options.noise_multiplier * cell.calibrated_noise) <= options.max_floor;
    Undecided(options, more_blocks_help, v);
    v.why = absl::StrFormat("cannot resolve%s: the floor %.2f%% (%s) is wider than the %.2f%% a \"same\" may hide: %s",
                            v.remeasure ? ", measure more blocks" : " on this host", 100 * v.floor,
                            FloorSource(cell, options), 100 * options.max_floor, numbers);
  } else if (v.ratio.lower >= lo && v.ratio.upper <= hi) {
    v.verdict = Verdict::kSame;
    v.why = absl::StrCat("interval inside the floor: ", numbers);
  } else {
    Undecided(options, /*more_blocks_help=*/true, v);
    const std::string interval =
        wide ? absl::StrFormat("the interval spans more than %g floors", options.max_interval_floors)
             : "the interval reaches past the floor";
    v.why = v.remeasure ? absl::StrCat("not decided (", interval, "), measure more blocks: ", numbers)
                        : absl::StrCat("not decided at the block cap (", interval, "): ", numbers);
  }
  if (v.accuracy.failed) {
    v.why += absl::StrFormat("; accuracy failed: error %g above tolerance %g",
                             cell.accuracy->candidate_error, cell.accuracy->tolerance);
  } else if (v.accuracy.grew) {
    v.why += absl::StrFormat("; error grew %.2fx (limit %.1fx): %g -> %g", v.accuracy.growth,
                             cell.accuracy->growth_limit, cell.accuracy->baseline_error,
                             cell.accuracy->candidate_error);
  }
}

}  // namespace

// The names are the store's (kRegressionVerdicts), in the enum's order, so a verdict is
// recorded under exactly the name the store, the proto and the dashboards use.
static_assert(kRegressionVerdicts.size() == 4);
const char* VerdictName(Verdict verdict) {
  const size_t i = static_cast<size_t>(verdict);
  return kRegressionVerdicts[i < kRegressionVerdicts.size() ? i : kRegressionVerdicts.size() - 1].data();
}

absl::StatusOr<Verdict> ParseVerdictName(std::string_view name) {
  for (Verdict v : {Verdict::kRegressed, Verdict::kImproved, Verdict::kSame, Verdict::kUnknown}) {
    if (name == VerdictName(v)) return v;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown verdict '", std::string(name), "'"));
}

const char* CorrectionName(Correction correction) {
  switch (correction) {
    case Correction::kNone:
      return "none";
    case Correction::kHolm:
      return "holm";
    case Correction::kBenjaminiHochberg:
      return "benjamini-hochberg";
  }
  return "holm";
}

absl::StatusOr<Correction> ParseCorrectionName(std::string_view name) {
  for (Correction c : kCorrections) {
    if (name == CorrectionName(c)) return c;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown correction '", std::string(name), "' (none, holm or benjamini-hochberg)"));
}

int PairedBlocksToResolve(int cells, double alpha) {
  if (!(alpha > 0 && alpha < 1)) return 3;
  const double needed = std::ceil(std::log2(4.0 * std::max(cells, 1) / alpha));
  return std::max(3, static_cast<int>(std::min(needed, 1000.0)));
}

double ErrorGrowthLimit(std::string_view precision) {
  return precision == "fp16" || precision == "bf16" ? 3.0 : 2.0;
}

bool CellVerdict::Failed() const {
  return verdict == Verdict::kRegressed || accuracy.failed || accuracy.grew;
}

absl::StatusOr<double> RatioNoise(const std::vector<double>& first,
                                  const std::vector<double>& second) {
  if (absl::Status s = ValidateSample(first, "first A/A"); !s.ok()) return s;
  if (absl::Status s = ValidateSample(second, "second A/A"); !s.ok()) return s;
  if (first.size() < 3 || second.size() < 3) {
    return absl::InvalidArgumentError("A/A noise needs at least 3 blocks per side");
  }
  std::vector<double> deviations;
  for (const std::vector<double>* set : {&first, &second}) {
    std::vector<double> logs;
    for (double v : *set) logs.push_back(std::log(v));
    AppendAbsDeviations(logs, deviations);
  }
  const double sigma = 1.4826 * Median(deviations);
  const double n1 = static_cast<double>(first.size()), n2 = static_cast<double>(second.size());
  return sigma * std::sqrt(std::numbers::pi / 2) * std::sqrt(1 / n1 + 1 / n2);
}

absl::StatusOr<double> PairedNoise(const std::vector<double>& baseline, const std::vector<double>& candidate) {
  if (absl::Status s = ValidateSample(baseline, "baseline"); !s.ok()) return s;
  if (absl::Status s = ValidateSample(candidate, "candidate"); !s.ok()) return s;
  if (baseline.size() != candidate.size()) {
    return absl::InvalidArgumentError("paired noise needs equal block counts");
  }
  if (baseline.size() < 3) return absl::InvalidArgumentError("paired noise needs at least 3 pairs");
  const std::vector<double> d = PairedLogRatios(baseline, candidate);
  std::vector<double> deviations;
  AppendAbsDeviations(d, deviations);
  const double sigma = 1.4826 * Median(deviations);
  return sigma * std::sqrt(std::numbers::pi / 2) / std::sqrt(static_cast<double>(d.size()));
}

double MinimumFloor(const CellInput& cell, const VerdictOptions& options) {
  return options.calibrated_min_floor && cell.calibrations >= options.min_calibrations ? *options.calibrated_min_floor
                                                                                       : options.min_floor;
}

double Floor(const CellInput& cell, const VerdictOptions& options) {
  return std::max(MinimumFloor(cell, options),
                  options.noise_multiplier * std::max(cell.aa_noise, cell.calibrated_noise));
}

absl::StatusOr<double> CalibratedNoise(const std::vector<double>& aa_ratios) {
  if (aa_ratios.empty()) return absl::InvalidArgumentError("calibrated noise needs at least one A/A ratio");
  double sum_of_squares = 0;
  for (double r : aa_ratios) {
    if (!(r > 0) || !std::isfinite(r)) {
      return absl::InvalidArgumentError(absl::StrCat("A/A ratio ", r, " must be finite and > 0"));
    }
    sum_of_squares += std::log(r) * std::log(r);
  }
  return std::sqrt(sum_of_squares / static_cast<double>(aa_ratios.size()));
}

absl::StatusOr<std::vector<CellVerdict>> JudgeSuite(const std::vector<CellInput>& cells,
                                                    const VerdictOptions& options) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  std::vector<CellVerdict> verdicts(cells.size());
  std::vector<double> p_slower(cells.size()), p_faster(cells.size());
  for (size_t i = 0; i < cells.size(); ++i) {
    const CellInput& cell = cells[i];
    if (absl::Status s = ValidateCell(cell); !s.ok()) return s;
    CellVerdict& v = verdicts[i];
    v.problem_key = cell.problem_key;
    v.config_key = cell.config_key;
    v.baseline_blocks = static_cast<int>(cell.baseline.size());
    v.candidate_blocks = static_cast<int>(cell.candidate.size());
    v.floor = Floor(cell, options);
    v.paired = cell.paired;
    absl::StatusOr<CellStatistics> stats = cell.paired ? PairedStatistics(cell, options) : UnpairedStatistics(cell, options);
    if (!stats.ok()) return stats.status();
    v.p_slower = p_slower[i] = stats->p_slower;
    v.p_faster = p_faster[i] = stats->p_faster;
    v.exact = stats->exact;
    v.ratio = stats->ratio;
    v.accuracy = JudgeAccuracy(cell.accuracy);
  }
  absl::StatusOr<std::vector<double>> slower_adjusted = Adjust(p_slower, options.correction);
  if (!slower_adjusted.ok()) return slower_adjusted.status();
  absl::StatusOr<std::vector<double>> faster_adjusted = Adjust(p_faster, options.correction);
  if (!faster_adjusted.ok()) return faster_adjusted.status();
  for (size_t i = 0; i < cells.size(); ++i) {
    verdicts[i].p_slower_adjusted = (*slower_adjusted)[i];
    verdicts[i].p_faster_adjusted = (*faster_adjusted)[i];
    Decide(cells[i], options, verdicts[i]);
  }
  return verdicts;
}

absl::StatusOr<CellVerdict> JudgeCell(const CellInput& cell, const VerdictOptions& options) {
  absl::StatusOr<std::vector<CellVerdict>> verdicts = JudgeSuite({cell}, options);
  if (!verdicts.ok()) return verdicts.status();
  return std::move(verdicts->front());
}

}  // namespace fusetune::regress
