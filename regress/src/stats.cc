#include "fusetune/regress/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace fusetune::regress {
namespace {

// Upper tail of the standard normal, P(Z > z).
double NormalSurvival(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

// The z with P(Z > z) == tail, 0 < tail < 1, by bisection (precise to 1e-12; called a few
// times per comparison, so speed does not matter).
double NormalUpperQuantile(double tail) {
  double lo = -40, hi = 40;
  for (int i = 0; i < 200 && hi - lo > 1e-12; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (NormalSurvival(mid) > tail) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return 0.5 * (lo + hi);
}

bool HasTies(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> all(a);
  all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  return std::adjacent_find(all.begin(), all.end()) != all.end();
}

// Sum over tie groups of t^3 - t, for the variance of U.
double TieTerm(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> all(a);
  all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  double term = 0;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j] == all[i]) ++j;
    const double t = static_cast<double>(j - i);
    term += t * t * t - t;
    i = j;
  }
  return term;
}

// The order statistics cut from each end of a distribution-free interval: the largest k with
// P(S <= k) <= tail under the null distribution `counts` of the test statistic S (counts[s] the
// number of equally likely arrangements with S == s); 0 when even P(S <= 0) exceeds it.
int64_t ExactCut(const std::vector<double>& counts, double tail) {
  const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
  int64_t k = 0;
  double cdf = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    cdf += counts[s] / total;
    if (cdf > tail * (1 + 1e-12)) break;
    k = static_cast<int64_t>(s);
  }
  return k;
}

// The interval from `sorted_logs` (log ratios, ascending) with `k` cut from each end (at most
// half of them), into result.lower and result.upper.
void SetInterval(const std::vector<double>& sorted_logs, int64_t k, RatioEstimate& result) {
  const int64_t count = static_cast<int64_t>(sorted_logs.size());
  k = std::clamp<int64_t>(k, 0, (count - 1) / 2);
  result.lower = std::exp(sorted_logs[static_cast<size_t>(k)]);
  result.upper = std::exp(sorted_logs[static_cast<size_t>(count - 1 - k)]);
}

absl::Status ValidatePValues(const std::vector<double>& p_values) {
  for (size_t i = 0; i < p_values.size(); ++i) {
    const double p = p_values[i];
    if (!(p >= 0 && p <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("p-value ", i, " is ", p, ": p-values must lie in [0, 1]"));
    }
  }
  return absl::OkStatus();
}

std::vector<size_t> AscendingOrder(const std::vector<double>& values) {
  std::vector<size_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return values[a] < values[b]; });
  return order;
}

}  // namespace

absl::Status ValidateSample(const std::vector<double>& sample, const char* name) {
  if (sample.empty()) return absl::InvalidArgumentError(absl::StrCat(name, " sample is empty"));
  for (size_t i = 0; i < sample.size(); ++i) {
    const double v = sample[i];
    if (!std::isfinite(v) || v <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " block ", i, " is ", v, ": block medians must be finite and > 0"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> MannWhitneyNullCounts(int m, int n) {
  if (m < 0 || n < 0 || m > 64 || n > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("sizes ", m, " and ", n, " outside [0, 64] for the exact U distribution"));
  }
  // counts[i][j] is the distribution for i values of one sample and j of the other. The
  // largest of the i + j values either belongs to the first sample (it beats all j others:
  // U shifts by j) or to the second (U unchanged).
  std::vector<std::vector<std::vector<double>>> counts(
      m + 1, std::vector<std::vector<double>>(n + 1));
  for (int i = 0; i <= m; ++i) {
    for (int j = 0; j <= n; ++j) {
      std::vector<double>& c = counts[i][j];
      c.assign(static_cast<size_t>(i) * j + 1, 0.0);
      if (i == 0 || j == 0) {
        c[0] = 1;
        continue;
      }
      const std::vector<double>& first = counts[i - 1][j];
      for (size_t u = 0; u < first.size(); ++u) c[u + j] += first[u];
      const std::vector<double>& second = counts[i][j - 1];
      for (size_t u = 0; u < second.size(); ++u) c[u] += second[u];
    }
  }
  return counts[m][n];
}

absl::StatusOr<RankTestResult> MannWhitneySlower(const std::vector<double>& baseline,
                                                 const std::vector<double>& candidate) {
  if (absl::Status s = ValidateSample(baseline, "baseline"); !s.ok()) return s;
  if (absl::Status s = ValidateSample(candidate, "candidate"); !s.ok()) return s;
  RankTestResult result;
  for (double c : candidate) {
    for (double b : baseline) result.u += c > b ? 1.0 : (c == b ? 0.5 : 0.0);
  }
  const int m = static_cast<int>(candidate.size());
  const int n = static_cast<int>(baseline.size());
  const double mn = static_cast<double>(m) * n;
  if (m <= kExactRankTestMaxSize && n <= kExactRankTestMaxSize && !HasTies(baseline, candidate)) {
    absl::StatusOr<std::vector<double>> counts = MannWhitneyNullCounts(m, n);
    if (!counts.ok()) return counts.status();
    const size_t u_obs = static_cast<size_t>(std::llround(result.u));
    double tail = 0, total = 0;
    for (size_t u = 0; u < counts->size(); ++u) {
      total += (*counts)[u];
      if (u >= u_obs) tail += (*counts)[u];
    }
    result.p_value = tail / total;
    result.exact = true;
    return result;
  }
  const double total_n = m + n;
  const double variance =
      mn / 12.0 * ((total_n + 1) - TieTerm(baseline, candidate) / (total_n * (total_n - 1)));
  if (variance <= 0) {
    result.p_value = 1;  // every value tied: no evidence either way
    return result;
  }
  const double z = (result.u - mn / 2.0 - 0.5) / std::sqrt(variance);
  result.p_value = std::min(1.0, NormalSurvival(z));
  return result;
}

double KolmogorovSurvival(double lambda) {
  if (lambda <= 0) return 1;
  // The alternating series converges fast above ~0.2; below, Q is 1 to double precision.
  if (lambda < 0.2) return 1;
  double sum = 0;
  for (int k = 1; k <= 100; ++k) {
    const double term = std::exp(-2.0 * k * k * lambda * lambda);
    sum += (k % 2 == 1 ? term : -term);
    if (term < 1e-16) break;
  }
  return std::clamp(2 * sum, 0.0, 1.0);
}

absl::StatusOr<KsTestResult> KolmogorovSmirnov(const std::vector<double>& baseline,
                                               const std::vector<double>& candidate) {
  if (absl::Status s = ValidateSample(baseline, "baseline"); !s.ok()) return s;
  if (absl::Status s = ValidateSample(candidate, "candidate"); !s.ok()) return s;
  std::vector<double> b(baseline), c(candidate);
  std::sort(b.begin(), b.end());
  std::sort(c.begin(), c.end());
  const double nb = static_cast<double>(b.size()), nc = static_cast<double>(c.size());
  KsTestResult result;
  size_t i = 0, j = 0;
  // Step through the distinct values; both CDFs are evaluated after each value.
  while (i < b.size() || j < c.size()) {
    const double x = (j >= c.size() || (i < b.size() && b[i] <= c[j])) ? b[i] : c[j];
    while (i < b.size() && b[i] == x) ++i;
    while (j < c.size() && c[j] == x) ++j;
    const double diff = i / nb - j / nc;
    result.d = std::max(result.d, std::abs(diff));
    result.d_slower = std::max(result.d_slower, diff);
  }
  const double ne = nb * nc / (nb + nc);
  const double root = std::sqrt(ne);
  result.p_two_sided = KolmogorovSurvival((root + 0.12 + 0.11 / root) * result.d);
  result.p_slower = std::min(1.0, std::exp(-2.0 * ne * result.d_slower * result.d_slower));
  return result;
}

absl::StatusOr<std::vector<double>> HolmAdjust(const std::vector<double>& p_values) {
  if (absl::Status s = ValidatePValues(p_values); !s.ok()) return s;
  const size_t m = p_values.size();
  const std::vector<size_t> order = AscendingOrder(p_values);
  std::vector<double> adjusted(m);
  double running_max = 0;
  for (size_t rank = 0; rank < m; ++rank) {
    const double scaled = std::min(1.0, static_cast<double>(m - rank) * p_values[order[rank]]);
    running_max = std::max(running_max, scaled);
    adjusted[order[rank]] = running_max;
  }
  return adjusted;
}

absl::StatusOr<std::vector<double>> BenjaminiHochbergAdjust(const std::vector<double>& p_values) {
  if (absl::Status s = ValidatePValues(p_values); !s.ok()) return s;
  const size_t m = p_values.size();
  const std::vector<size_t> order = AscendingOrder(p_values);
  std::vector<double> adjusted(m);
  double running_min = 1;
  for (size_t rank = m; rank-- > 0;) {
    const double scaled =
        std::min(1.0, static_cast<double>(m) / static_cast<double>(rank + 1) * p_values[order[rank]]);
    running_min = std::min(running_min, scaled);
    adjusted[order[rank]] = running_min;
  }
  return adjusted;
}

absl::StatusOr<RatioEstimate> RatioOfMedians(const std::vector<double>& baseline,
                                             const std::vector<double>& candidate,
                                             double confidence) {
  if (absl::Status s = ValidateSample(baseline, "baseline"); !s.ok()) return s;
  if (absl::Status s = ValidateSample(candidate, "candidate"); !s.ok()) return s;
  if (!(confidence > 0 && confidence < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("confidence ", confidence, " outside (0, 1)"));
  }
  RatioEstimate result;
  result.confidence = confidence;
  result.ratio = Median(candidate) / Median(baseline);
  // Pairwise log ratios: the interval for a multiplicative factor is the shift interval on
  // log times.
  std::vector<double> logs;
  logs.reserve(baseline.size() * candidate.size());
  for (double c : candidate) {
    for (double b : baseline) logs.push_back(std::log(c) - std::log(b));
  }
  std::sort(logs.begin(), logs.end());
  result.pairwise_ratio = std::exp(Median(logs));
  const int m = static_cast<int>(candidate.size());
  const int n = static_cast<int>(baseline.size());
  const double tail = (1 - confidence) / 2;
  // k: the number of pairwise ratios cut from each end. The (k+1)-th smallest lies above the
  // true log factor exactly when at most k pairwise differences fall below it, an event of
  // null probability P(U <= k): k is the largest with P(U <= k) <= tail.
  int64_t k = 0;
  if (m <= kExactRankTestMaxSize && n <= kExactRankTestMaxSize) {
    absl::StatusOr<std::vector<double>> counts = MannWhitneyNullCounts(m, n);
    if (!counts.ok()) return counts.status();
    k = ExactCut(*counts, tail);
  } else {
    const double mn = static_cast<double>(m) * n;
    const double sd = std::sqrt(mn * (m + n + 1) / 12.0);
    k = static_cast<int64_t>(std::floor(mn / 2.0 - 0.5 - NormalUpperQuantile(tail) * sd));
  }
  SetInterval(logs, k, result);
  return result;
}

absl::StatusOr<std::vector<double>> SignedRankNullCounts(int n) {
  if (n < 0 || n > 50) return absl::InvalidArgumentError(absl::StrCat("signed-rank counts need 0 <= n <= 50, not ", n));
  const int max_t = n * (n + 1) / 2;
  std::vector<double> counts(static_cast<size_t>(max_t) + 1, 0.0);
  counts[0] = 1;
  // Adding rank r: every pattern either leaves r out or adds it to T+.
  for (int r = 1; r <= n; ++r) {
    for (int t = r * (r + 1) / 2; t >= r; --t) counts[static_cast<size_t>(t)] += counts[static_cast<size_t>(t - r)];
  }
  return counts;
}

absl::StatusOr<SignedRankTestResult> WilcoxonSignedRankAbove(const std::vector<double>& differences) {
  if (differences.empty()) return absl::InvalidArgumentError("the signed-rank test needs at least one difference");
  std::vector<double> nonzero;
  for (double d : differences) {
    if (!std::isfinite(d)) return absl::InvalidArgumentError(absl::StrCat("difference ", d, " is not finite"));
    if (d != 0) nonzero.push_back(d);
  }
  SignedRankTestResult result;
  const int n = static_cast<int>(nonzero.size());
  result.nonzero = n;
  if (n == 0) return result;
  // Ranks of |d| with mid-ranks for ties.
  std::vector<size_t> order(nonzero.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return std::abs(nonzero[a]) < std::abs(nonzero[b]); });
  double tie_term = 0;
  bool ties = false;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && std::abs(nonzero[order[j]]) == std::abs(nonzero[order[i]])) ++j;
    const double rank = 0.5 * static_cast<double>(i + 1 + j);  // mean of ranks i+1 .. j
    for (size_t k = i; k < j; ++k) {
      if (nonzero[order[k]] > 0) result.t_plus += rank;
    }
    const double t = static_cast<double>(j - i);
    if (j - i > 1) ties = true;
    tie_term += t * t * t - t;
    i = j;
  }
  if (n <= kExactSignedRankMaxSize && !ties) {
    absl::StatusOr<std::vector<double>> counts = SignedRankNullCounts(n);
    if (!counts.ok()) return counts.status();
    const double total = std::ldexp(1.0, n);
    double upper = 0;
    for (size_t t = static_cast<size_t>(std::llround(result.t_plus)); t < counts->size(); ++t) upper += (*counts)[t];
    result.p_value = std::min(1.0, upper / total);
    result.exact = true;
    return result;
  }
  const double nn = static_cast<double>(n);
  const double mean = nn * (nn + 1) / 4;
  const double var = nn * (nn + 1) * (2 * nn + 1) / 24 - tie_term / 48;
  if (!(var > 0)) return result;
  const double z = (result.t_plus - mean - 0.5) / std::sqrt(var);
  result.p_value = std::min(1.0, NormalSurvival(z));
  return result;
}

absl::StatusOr<RatioEstimate> PairedRatio(const std::vector<double>& baseline, const std::vector<double>& candidate,
                                          double confidence) {
  if (absl::Status s = ValidateSample(baseline, "baseline"); !s.ok()) return s;
  if (absl::Status s = ValidateSample(candidate, "candidate"); !s.ok()) return s;
  if (baseline.size() != candidate.size()) {
    return absl::InvalidArgumentError(absl::StrCat("paired samples need equal sizes, not ", baseline.size(), " and ",
                                                   candidate.size()));
  }
  if (!(confidence > 0 && confidence < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("confidence ", confidence, " outside (0, 1)"));
  }
  RatioEstimate result;
  result.confidence = confidence;
  result.ratio = Median(candidate) / Median(baseline);
  const size_t n = baseline.size();
  const std::vector<double> d = PairedLogRatios(baseline, candidate);
  std::vector<double> walsh;
  walsh.reserve(n * (n + 1) / 2);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i; j < n; ++j) walsh.push_back(0.5 * (d[i] + d[j]));
  }
  std::sort(walsh.begin(), walsh.end());
  result.pairwise_ratio = std::exp(Median(walsh));
  const double tail = (1 - confidence) / 2;
  // k: the Walsh averages cut from each end. The (k+1)-th smallest lies above the true log
  // factor exactly when T+ of the shifted differences is at most k, of null probability
  // P(T+ <= k): k is the largest with P(T+ <= k) <= tail.
  int64_t k = 0;
  const int ni = static_cast<int>(n);
  if (ni <= kExactSignedRankMaxSize) {
    absl::StatusOr<std::vector<double>> counts = SignedRankNullCounts(ni);
    if (!counts.ok()) return counts.status();
    k = ExactCut(*counts, tail);
  } else {
    const double nn = static_cast<double>(n);
    const double m = nn * (nn + 1) / 2;
    const double sd = std::sqrt(nn * (nn + 1) * (2 * nn + 1) / 24);
    k = static_cast<int64_t>(std::floor(m / 2.0 - 0.5 - NormalUpperQuantile(tail) * sd));
  }
  SetInterval(walsh, k, result);
  return result;
}

std::vector<double> PairedLogRatios(const std::vector<double>& baseline, const std::vector<double>& candidate) {
  const size_t n = std::min(baseline.size(), candidate.size());
  std::vector<double> d(n);
  for (size_t i = 0; i < n; ++i) d[i] = std::log(candidate[i]) - std::log(baseline[i]);
  return d;
}

}  // namespace fusetune::regress
