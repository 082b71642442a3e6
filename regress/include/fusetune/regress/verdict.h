// Per-cell regression verdicts: is a (problem, config) cell slower, faster, the same, or not
// yet known at a candidate commit, compared with a baseline commit on the same device class,
// and did its accuracy get worse?
//
// The rule (JudgeSuite applies it to every cell):
//   floor  = max(minimum, noise_multiplier * max(aa_noise, calibrated_noise))   (Floor)
//   minimum = calibrated_min_floor for a cell calibrated by at least min_calibrations A/A
//             comparisons when that option is set, else min_floor              (MinimumFloor)
//   hi     = 1 + floor,   lo = 1 / (1 + floor)          (symmetric on a log scale)
//   r      = the Hodges–Lehmann ratio (median of the pairwise candidate/baseline ratios)
//   [L, U] = its distribution-free `confidence` interval (stats.h, RatioOfMedians)
//   wide       when log(U / L) > max_interval_floors * log(hi): the interval spans several
//              floors, so nothing is resolved, whatever the test says
//   regressed  when adjusted p(slower) < alpha and r > hi and not wide
//   improved   when adjusted p(faster) < alpha and r < lo and not wide
//   same       when lo <= L and U <= hi and floor <= max_floor   (checked after the two above)
//   unknown    otherwise: re-measure with more blocks, up to max_blocks a side, unless the
//              floor is wider than max_floor for a reason more blocks cannot change (the
//              minimum or the calibrated noise): such a cell cannot be resolved on this host,
//              and its reason says so.
// p(slower) and p(faster) are the one-sided Mann–Whitney p-values; each direction is adjusted
// across the suite's cells as its own family (Holm by default, or Benjamini–Hochberg).
//
// Paired cells (CellInput::paired: block i of each side measured in the same round of an
// interleaved comparison) use the per-round log ratios instead: r is their Hodges–Lehmann
// estimate with Tukey's interval (stats.h, PairedRatio), the p-values the one-sided Wilcoxon
// signed-rank test, and the blocks' noise PairedNoise. Why: the device's state (clock, power
// cap, temperature, what else runs on the host) moves from round to round, and both sides of a
// round see about the same state, so their ratio moves less than either side; the unpaired
// statistics count that movement as noise twice. On the H200 this cut most cells' noise 2-10x
// (docs/perf.md).
//
// Why the point ratio and not the interval's lower bound against the floor: the test already
// bounds the A/A false alarms at alpha; the floor only keeps real but negligible changes (and
// between-session drift below it) from being called. Requiring L > hi would add the interval's
// half-width to the floor: a slowdown of exactly the floor would be found about half the
// time by this rule, and only a few percent of the time by L > hi. The cost is that a drift
// just under the floor can be called in up to half the comparisons, which is why the floor
// is three times the measured A/A noise.
//
// A/A noise (`aa_noise`) is the relative standard deviation of the ratio of medians between
// two runs of the same build at the block count in use (0.005 = 0.5 %); RatioNoise estimates
// it from one A/A pair of block sets. It shrinks with more blocks. Two processes of one build
// can also differ systematically (placement of their threads and memory: up to tens of percent
// for a few cells on a loaded 2-core host, docs/perf.md), which no spread of blocks shows:
// `calibrated_noise` is that difference's standard deviation as earlier A/A comparisons of the
// cell measured it (CalibratedNoise), and more blocks do not shrink it.
//
// Why a calibrated cell may have a lower minimum: the fixed min_floor stands for what the
// blocks of one comparison cannot show, how far two builds with the same kernels differ for a
// whole run (placement of their memory, their processes: up to about 2 % on the H200 before
// both sides shared one process, docs/perf.md). A cell's A/A comparisons measure exactly that,
// per cell: once there are min_calibrations of them, 3 x their root mean square log ratio is
// that cell's own allowance, and the fixed minimum only needs to say which changes are too
// small to matter (calibrated_min_floor). A cell whose sides keep differing (the H200's decode
// k65536 split-KV cells, about 1 % every run) keeps a floor of three times that; a quiet cell
// can then be judged on changes of about 1 %, which a fixed 1.5 % minimum never calls.
//
// Why a wide interval is never called: on a shared host a few rounds disturbed on one side only
// (bursts of load from a compile beside it) can make every round's ratio fall one way, which
// the signed-rank test counts as a direction, while the interval of the estimate spans most of
// those rounds' spread. On the CPU beside a compiling build a materialized cell was called
// faster at 0.907 [0.496, 0.981] with a 5.9 % floor after 13 rounds of an A/A (docs/perf.md);
// real changes the method has called had intervals narrower than their floor. Such a cell is
// re-measured like any undecided one.
//
// Why a cell can be unknown for want of resolution: a "same" promises that no change larger
// than the floor happened. Past max_floor that promise hides changes a suite exists to catch,
// so the cell is reported unknown with the floor and what set it; a change larger than such a
// floor is still called regressed or improved.
//
// Accuracy: a candidate error above the cell's hard tolerance (or NaN) fails the cell; an
// error more than growth_limit times the baseline's (ErrorGrowthLimit: 3 for fp16/bf16, 2
// otherwise) is flagged even inside the tolerance, and counts as a failure of the cell.
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_REGRESS_VERDICT_H_
#define FUSETUNE_REGRESS_VERDICT_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/regress/stats.h"

namespace fusetune::regress {

enum class Verdict { kRegressed, kImproved, kSame, kUnknown };

// "regressed", "improved", "same", "unknown".
const char* VerdictName(Verdict verdict);
// The verdict a VerdictName names; InvalidArgument for any other text.
absl::StatusOr<Verdict> ParseVerdictName(std::string_view name);

enum class Correction { kNone, kHolm, kBenjaminiHochberg };
// Every correction, the default first: what a name may be, in the order flags list them.
inline constexpr Correction kCorrections[] = {Correction::kHolm, Correction::kBenjaminiHochberg, Correction::kNone};

// A correction's name in suites, flags and reports: "none", "holm", "benjamini-hochberg".
const char* CorrectionName(Correction correction);
// InvalidArgument, listing the names, for any other.
absl::StatusOr<Correction> ParseCorrectionName(std::string_view name);

struct VerdictOptions {
  // Significance level of the adjusted one-sided p-values.
  double alpha = 0.01;
  // The effect-size floor is max(min_floor, noise_multiplier * the cell's noise) (Floor).
  double min_floor = 0.015;
  double noise_multiplier = 3.0;
  // The minimum for cells with at least min_calibrations A/A comparisons behind their
  // calibrated_noise (see above); absent: min_floor for every cell. In [0, max_floor].
  std::optional<double> calibrated_min_floor;
  int min_calibrations = 3;  // >= 1
  // The widest floor at which a cell may be called "same" (see above); >= min_floor.
  double max_floor = 0.10;
  // Confidence of the ratio's interval (the "same" verdict needs it inside the floor).
  double confidence = kDefaultConfidence;
  // A cell whose interval spans more than this many floors (on a log scale) is not called
  // regressed or improved (see above); > 0.
  double max_interval_floors = 4.0;
  // Unknown cells are re-measured until each side has this many blocks.
  int max_blocks = 40;
  // Adjustment across the cells of a suite.
  Correction correction = Correction::kHolm;
};

// The block count each side of a comparison starts with (the method's measured rates in
// regress/README.md are for this count).
inline constexpr int kDefaultBlocks = 10;

// The rounds a paired comparison of `cells` cells needs before its test can call anything: the
// signed-rank test's smallest p-value with n pairs is 2^-n (every round on one side), and Holm
// asks the most significant of `cells` cells for p < alpha / cells, so n = ceil(log2(4 cells /
// alpha)) leaves a factor 4 to spare (15 for 62 cells at alpha 0.01, 12 for 8). At least 3;
// cells < 1 counts as 1. An unpaired first pass of 10 blocks a side reaches 1 / C(20, 10).
int PairedBlocksToResolve(int cells, double alpha);

// The error growth factor flagged for a precision: 3 for "fp16" and "bf16", 2 otherwise.
double ErrorGrowthLimit(std::string_view precision);

struct AccuracyInput {
  // Errors against the fp64 reference (any one metric, the same for both), >= 0.
  double baseline_error = 0;
  double candidate_error = 0;
  // The hard tolerance of the cell's precision (> 0).
  double tolerance = 0;
  // Growth over the baseline error that is flagged; ErrorGrowthLimit(precision).
  double growth_limit = 2;
};

struct AccuracyVerdict {
  bool checked = false;  // false when the cell had no AccuracyInput
  bool failed = false;   // candidate error above the tolerance, or not a number
  bool grew = false;     // within tolerance, but more than growth_limit x the baseline's
  double growth = 1;     // candidate_error / baseline_error (inf when the baseline is 0)
};

struct CellInput {
  std::string problem_key;
  std::string config_key;
  std::vector<double> baseline;   // block medians, > 0
  std::vector<double> candidate;  // block medians, > 0
  double aa_noise = 0;            // relative, >= 0: from this comparison's blocks
  double calibrated_noise = 0;    // relative, >= 0: from earlier A/A comparisons (0: none)
  int calibrations = 0;           // how many A/A comparisons calibrated_noise is over, >= 0
  // baseline[i] and candidate[i] were measured in the same round (equal sizes): judged on the
  // per-round ratios (the rule above).
  bool paired = false;
  std::optional<AccuracyInput> accuracy;
};

// The floor's minimum for the cell: options.calibrated_min_floor when it is set and the cell
// has at least options.min_calibrations calibrations, else options.min_floor.
double MinimumFloor(const CellInput& cell, const VerdictOptions& options);

// The cell's effect-size floor under `options`: max(MinimumFloor, noise_multiplier *
// max(aa_noise, calibrated_noise)).
double Floor(const CellInput& cell, const VerdictOptions& options);

struct CellVerdict {
  std::string problem_key;
  std::string config_key;
  Verdict verdict = Verdict::kUnknown;
  RatioEstimate ratio;          // ratio of medians, Hodges–Lehmann ratio and its interval
  double floor = 0;             // the effect-size floor used (relative): Floor()
  double p_slower = 1;          // raw one-sided p-value, candidate slower
  double p_slower_adjusted = 1;
  double p_faster = 1;          // raw one-sided p-value, candidate faster
  double p_faster_adjusted = 1;
  bool exact = false;           // p-values from the exact distribution
  bool paired = false;          // judged on per-round ratios (CellInput::paired)
  int baseline_blocks = 0;
  int candidate_blocks = 0;
  // Unknown and below max_blocks: measure again with suggested_blocks per side (what the
  // interval's width says it needs to fit inside the floor, 1.25x to 4x the blocks it has;
  // twice as many where the point ratio is on or past the floor), at most max_blocks.
  bool remeasure = false;
  int suggested_blocks = 0;
  AccuracyVerdict accuracy;
  std::string why;              // one sentence: the numbers that decided

  // Regressed, or accuracy failed or grew: what a CI run reports as a failure.
  bool Failed() const;
};

// Estimates aa_noise from one A/A pair of block sets (two runs of one build): the pooled
// robust spread of the log block medians (1.4826 x the median absolute deviation from each
// set's median) times sqrt(pi/2) (the median's efficiency) times sqrt(1/n1 + 1/n2). Fails on
// invalid samples or when either set has fewer than 3 blocks.
absl::StatusOr<double> RatioNoise(const std::vector<double>& first,
                                  const std::vector<double>& second);

// Estimates aa_noise of a paired cell from its blocks: the robust spread of the per-round log
// ratios (1.4826 x their median absolute deviation from their median) times sqrt(pi/2) over
// sqrt(n), the standard deviation of their median. Shift-invariant, so a real change does not
// widen its own floor. Fails on invalid samples, unequal sizes or fewer than 3 pairs.
absl::StatusOr<double> PairedNoise(const std::vector<double>& baseline, const std::vector<double>& candidate);

// Estimates calibrated_noise from the Hodges–Lehmann ratios of a cell's earlier A/A
// comparisons (two processes of one build each; newest first or any order): the root mean
// square of their logs, each comparison being one draw of the between-process difference.
// One comparison gives a rough estimate (its own |log ratio|); more give a better one. Fails
// when `aa_ratios` is empty or a ratio is not finite and > 0.
absl::StatusOr<double> CalibratedNoise(const std::vector<double>& aa_ratios);

// Judges every cell, adjusting the p-values across all of them. Output order = input order.
// Fails (and judges nothing) when any cell's samples are invalid (stats.h), its aa_noise or
// calibrated_noise is negative or not finite, its accuracy input is invalid, or the options
// are out of range (alpha and confidence in (0, 1), 0 <= min_floor <= max_floor, finite
// floors and multiplier >= 0, max_blocks >= 1).
absl::StatusOr<std::vector<CellVerdict>> JudgeSuite(const std::vector<CellInput>& cells,
                                                    const VerdictOptions& options = {});

// One cell alone (no adjustment: adjusted p-values equal the raw ones).
absl::StatusOr<CellVerdict> JudgeCell(const CellInput& cell, const VerdictOptions& options = {});

}  // namespace fusetune::regress

#endif  // FUSETUNE_REGRESS_VERDICT_H_
