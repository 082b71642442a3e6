// Two-sample statistics on block medians: the rank test, the Kolmogorov–Smirnov test, the
// multiple-comparison adjustments and the ratio of medians with its confidence interval.
//
// A "sample" is a vector of block medians (times, any unit, each > 0 and finite): one value
// per block of many launches. Every function rejects empty samples, NaN, infinities and
// non-positive times with InvalidArgument; nothing here throws.
//
// Thread-safety: pure functions, safe to call from any thread.
#ifndef FUSETUNE_REGRESS_STATS_H_
#define FUSETUNE_REGRESS_STATS_H_

#include <cstdint>
#include <vector>

#include "fusetune/base/median.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fusetune::regress {

// The largest sample size (each side) for which the rank test uses its exact null
// distribution; above it, the normal approximation.
inline constexpr int kExactRankTestMaxSize = 20;

// The confidence of the ratio's interval unless a caller asks for another.
inline constexpr double kDefaultConfidence = 0.9;

// Checks that `sample` is non-empty and every value finite and > 0. `name` goes into the
// message ("baseline", "candidate").
absl::Status ValidateSample(const std::vector<double>& sample, const char* name);

struct RankTestResult {
  // Mann–Whitney U of the candidate: the number of (candidate, baseline) pairs with the
  // candidate larger, ties counting one half. Ranges over [0, n_baseline * n_candidate].
  double u = 0;
  // One-sided p-value of the alternative "candidate is slower" (stochastically larger).
  double p_value = 1;
  // True when p_value comes from the exact null distribution (both sizes at most
  // kExactRankTestMaxSize and no ties); false for the normal approximation.
  bool exact = false;
};

// One-sided Mann–Whitney U test: is `candidate` stochastically larger (slower) than
// `baseline`? Exact when both sizes are <= kExactRankTestMaxSize and no value is tied (the
// permutation distribution of U by the standard recurrence); otherwise the normal
// approximation with the tie correction of the variance and a continuity correction of 0.5.
// For the other direction swap the arguments. Fails on invalid samples.
absl::StatusOr<RankTestResult> MannWhitneySlower(const std::vector<double>& baseline,
                                                 const std::vector<double>& candidate);

// The null distribution of U for sizes m and n without ties: element u is the number of the
// C(m+n, m) orderings with U == u, u = 0..m*n (as doubles: C(40, 20) is exact in a double).
// Fails for negative sizes or sizes above 64 (the counts would lose exactness).
absl::StatusOr<std::vector<double>> MannWhitneyNullCounts(int m, int n);

struct KsTestResult {
  // Two-sided statistic sup |F_baseline - F_candidate| and its asymptotic p-value.
  double d = 0;
  double p_two_sided = 1;
  // One-sided statistic sup (F_baseline - F_candidate): large when the candidate is slower;
  // its asymptotic p-value exp(-2 n_e D+^2).
  double d_slower = 0;
  double p_slower = 1;
};

// Two-sample Kolmogorov–Smirnov test. The p-values are asymptotic (Kolmogorov's limit
// distribution with the effective size n_e = n1 n2 / (n1 + n2) and Stephens' small-sample
// factor for the two-sided one); they are conservative-to-rough below about 10 per side, so
// use them beside the rank test, not instead of it. Fails on invalid samples.
absl::StatusOr<KsTestResult> KolmogorovSmirnov(const std::vector<double>& baseline,
                                               const std::vector<double>& candidate);

// Kolmogorov's survival function Q(lambda) = 2 sum_{k>=1} (-1)^(k-1) exp(-2 k^2 lambda^2),
// the asymptotic P(sqrt(n) D > lambda). 1 for lambda <= 0.
double KolmogorovSurvival(double lambda);

// Holm's step-down adjustment (controls the family-wise error rate): adjusted p-values in the
// input's order, each in [0, 1]. Fails when a p-value is NaN or outside [0, 1]; an empty
// input gives an empty output.
absl::StatusOr<std::vector<double>> HolmAdjust(const std::vector<double>& p_values);

// Benjamini–Hochberg step-up adjustment (controls the false discovery rate, for independent
// or positively dependent tests): adjusted p-values in the input's order. Same failures as
// HolmAdjust.
absl::StatusOr<std::vector<double>> BenjaminiHochbergAdjust(const std::vector<double>& p_values);

struct RatioEstimate {
  // median(candidate) / median(baseline): > 1 means the candidate is slower.
  double ratio = 1;
  // The Hodges–Lehmann estimate of the ratio: the median of all candidate/baseline pairwise
  // ratios, the centre of the interval below. This is "the ratio" of a cell wherever one is
  // shown or stored (verdicts, markdown, JUnit's `ratio`, regression rows).
  double pairwise_ratio = 1;
  // Distribution-free confidence interval for the ratio under the model "candidate =
  // baseline times a constant factor, any distribution" (Moses' interval: order statistics of
  // the pairwise ratios at the exact, tie-free Mann–Whitney critical values, or their normal
  // approximation above kExactRankTestMaxSize). Its coverage is at least `confidence` for
  // continuous data at the exact sizes, and about `confidence` above them.
  double lower = 1;
  double upper = 1;
  double confidence = kDefaultConfidence;
};

// The ratio of medians with a `confidence` interval (0 < confidence < 1). When the samples
// are too small for an interval at that confidence (e.g. 2 against 2 at 90 %), the interval
// is the whole range of pairwise ratios and the result says so only through its width.
// Fails on invalid samples or confidence.
absl::StatusOr<RatioEstimate> RatioOfMedians(const std::vector<double>& baseline,
                                             const std::vector<double>& candidate,
                                             double confidence = kDefaultConfidence);

// Paired samples: baseline[i] and candidate[i] were measured side by side (in the same round of
// an interleaved comparison), so what the device did between rounds (clock, power cap,
// temperature) is common to both and drops out of their ratio. The statistics below work on the
// per-pair log ratios d_i = log(candidate[i] / baseline[i]).

// log(candidate[i] / baseline[i]) for each pair (the first min(sizes) of them; the inputs
// already validated).
std::vector<double> PairedLogRatios(const std::vector<double>& baseline, const std::vector<double>& candidate);

// The largest number of non-zero differences for which the signed-rank test uses its exact
// null distribution (2^40 sign patterns: the counts are exact in a double); above it, the
// normal approximation.
inline constexpr int kExactSignedRankMaxSize = 40;

struct SignedRankTestResult {
  // Wilcoxon's T+: the sum of the ranks of |d| (zeros dropped, ties given mid-ranks) over the
  // positive differences. Ranges over [0, n (n + 1) / 2] for n non-zero differences.
  double t_plus = 0;
  // One-sided p-value of the alternative "the differences lie above zero" (the candidate
  // slower, for d = log(candidate / baseline)); 1 when every difference is zero.
  double p_value = 1;
  // True when p_value comes from the exact null distribution (at most kExactSignedRankMaxSize
  // non-zero differences, no ties among |d|); false for the normal approximation.
  bool exact = false;
  int nonzero = 0;  // differences that were not zero
};

// One-sided Wilcoxon signed-rank test on `differences` (any finite values; the null hypothesis
// is a distribution symmetric about zero, as for the log ratio of two blocks of one build
// measured side by side in a random order). Exact when allowed (see above); otherwise the normal
// approximation with the tie correction of the variance and a continuity correction of 0.5.
// For the other direction negate the differences. Fails on an empty input or a value that is
// not finite.
absl::StatusOr<SignedRankTestResult> WilcoxonSignedRankAbove(const std::vector<double>& differences);

// The null distribution of T+ for n non-zero, untied differences: element t is the number of
// the 2^n sign patterns with T+ == t, t = 0..n(n+1)/2. Fails for n < 0 or n > 50 (the counts
// would lose exactness).
absl::StatusOr<std::vector<double>> SignedRankNullCounts(int n);

// The ratio of paired samples (equal sizes, at least 1): `ratio` is the ratio of the medians as
// for RatioOfMedians; `pairwise_ratio` the Hodges–Lehmann estimate of the paired log ratios
// (the median of the Walsh averages (d_i + d_j) / 2, i <= j); the interval Tukey's
// distribution-free one for it: order statistics of the Walsh averages at the signed-rank
// test's critical values (exact up to kExactSignedRankMaxSize pairs, normal approximation
// above), coverage at least `confidence` for continuous symmetric differences. Fails on invalid
// samples, unequal sizes or a confidence outside (0, 1).
absl::StatusOr<RatioEstimate> PairedRatio(const std::vector<double>& baseline, const std::vector<double>& candidate,
                                          double confidence = kDefaultConfidence);

}  // namespace fusetune::regress

#endif  // FUSETUNE_REGRESS_STATS_H_
