#include "fusetune/regress/change_points.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_format.h"

namespace fusetune::regress {
namespace {

struct SegmentStats {
  int n = 0;
  double mean = 0;
  double variance = 0;  // sample variance (n - 1 in the denominator); 0 below 2 points
};

SegmentStats StatsOf(const double* x, int begin, int end) {
  SegmentStats s;
  s.n = end - begin;
  if (s.n <= 0) return s;
  double sum = 0;
  for (int i = begin; i < end; ++i) sum += x[i];
  s.mean = sum / s.n;
  if (s.n < 2) return s;
  double squares = 0;
  for (int i = begin; i < end; ++i) squares += (x[i] - s.mean) * (x[i] - s.mean);
  s.variance = squares / (s.n - 1);
  return s;
}

double PValueOf(const SegmentStats& left, const SegmentStats& right) {
  return WelchTTestPValue(left.n, left.mean, left.variance, right.n, right.mean, right.variance);
}

// Prefix sums of the values less the first one (which keeps the sums of squares free of
// cancellation for times with a small spread around a large mean): segment statistics in O(1).
class PrefixSums {
 public:
  explicit PrefixSums(const std::vector<double>& x) : sum_(x.size() + 1, 0.0), squares_(x.size() + 1, 0.0) {
    offset_ = x.empty() ? 0 : x[0];
    for (size_t i = 0; i < x.size(); ++i) {
      const double d = x[i] - offset_;
      sum_[i + 1] = sum_[i] + d;
      squares_[i + 1] = squares_[i] + d * d;
    }
  }
  SegmentStats Stats(int begin, int end) const {
    SegmentStats s;
    s.n = end - begin;
    if (s.n <= 0) return s;
    const double sum = sum_[end] - sum_[begin];
    const double mean_offset = sum / s.n;
    s.mean = offset_ + mean_offset;
    if (s.n >= 2) {
      s.variance = std::max(0.0, (squares_[end] - squares_[begin] - sum * mean_offset) / (s.n - 1));
    }
    return s;
  }

 private:
  double offset_ = 0;
  std::vector<double> sum_;
  std::vector<double> squares_;
};

// The split of x[begin, end) that maximises the energy statistic Q, each side at least
// min_segment points; -1 when the segment is too short. O((end - begin)^2).
int BestEnergySplit(const double* x, int begin, int end, int min_segment) {
  const int length = end - begin;
  if (length < 2 * min_segment) return -1;
  // to_left[t] / to_right[t]: summed distances from x[t] to the points before / after it.
  std::vector<double> to_left(length, 0.0), to_right(length, 0.0);
  double within_right = 0;
  for (int t = 0; t < length; ++t) {
    for (int i = 0; i < t; ++i) {
      const double d = std::fabs(x[begin + i] - x[begin + t]);
      to_left[t] += d;
      to_right[i] += d;
    }
    within_right += to_left[t];
  }
  double within_left = 0, between = 0;
  double best_q = -std::numeric_limits<double>::infinity();
  int best = -1;
  for (int t = 0; t + min_segment < length; ++t) {
    // Move x[t] from the right side to the left one: the split is now at t + 1.
    within_left += to_left[t];
    within_right -= to_right[t];
    between += to_right[t] - to_left[t];
    const int n_left = t + 1, n_right = length - n_left;
    if (n_left < min_segment) continue;
    const double e_between = between / (static_cast<double>(n_left) * n_right);
    const double e_left = within_left / (0.5 * n_left * (n_left - 1));
    const double e_right = within_right / (0.5 * n_right * (n_right - 1));
    const double q = static_cast<double>(n_left) * n_right / length * (2 * e_between - e_left - e_right);
    if (q > best_q) {
      best_q = q;
      best = begin + n_left;
    }
  }
  return best;
}

// The divisive search of one window: accepted splits of x[begin, end) go to `splits`.
void DivisiveSearch(const double* x, int begin, int end, const ChangePointOptions& options,
                    std::vector<int>* splits) {
  const int split = BestEnergySplit(x, begin, end, options.min_segment);
  if (split < 0) return;
  const double p = PValueOf(StatsOf(x, begin, split), StatsOf(x, split, end));
  if (!(p <= options.max_p_value)) return;
  splits->push_back(split);
  DivisiveSearch(x, begin, split, options, splits);
  DivisiveSearch(x, split, end, options, splits);
}

// The window starts for a series of n points: every window/2 points, leaving out a window
// whose predecessor already reaches the end of the series.
std::vector<int> WindowStarts(int n, int window) {
  const int step = std::max(1, window / 2);
  std::vector<int> starts;
  for (int s = 0; s < n; s += step) {
    if (s > 0 && s - step + window >= n) break;
    starts.push_back(s);
  }
  return starts;
}

absl::Status ValidatePoints(const std::vector<SeriesPoint>& points, int first_index) {
  for (size_t i = 0; i < points.size(); ++i) {
    const double v = points[i].value;
    if (!std::isfinite(v) || v <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "series point %d (commit '%s') is %g: every value must be finite and > 0",
          first_index + static_cast<int>(i), points[i].commit, v));
    }
  }
  return absl::OkStatus();
}

struct Candidate {
  int index = 0;
  double p_value = 1;
  double relative_change = 0;
  SegmentStats before, after;
};

Candidate Evaluate(const PrefixSums& sums, int previous, int index, int next, int min_segment) {
  Candidate c;
  c.index = index;
  c.before = sums.Stats(previous, index);
  c.after = sums.Stats(index, next);
  c.relative_change = c.after.mean / c.before.mean - 1;
  // A candidate squeezed against its neighbour (two windows found one shift one point
  // apart) cannot be tested alone: it is the first to go.
  c.p_value = (c.before.n < min_segment || c.after.n < min_segment) ? 1.0 : PValueOf(c.before, c.after);
  return c;
}

bool Fails(const Candidate& c, const ChangePointOptions& options) {
  return !(c.p_value <= options.max_p_value) || std::fabs(c.relative_change) < options.min_relative_change;
}

// Removes the weakest failing candidate (the largest p-value, then the smallest change, then
// the later index) until every one passes against its neighbours; returns the survivors,
// evaluated. O(k) O(1) evaluations per round, at most k rounds.
std::vector<Candidate> PruneCandidates(const PrefixSums& sums, std::vector<int> indices, int n,
                                       const ChangePointOptions& options) {
  std::vector<Candidate> evaluated;
  while (true) {
    evaluated.clear();
    for (size_t k = 0; k < indices.size(); ++k) {
      const int previous = k == 0 ? 0 : indices[k - 1];
      const int next = k + 1 == indices.size() ? n : indices[k + 1];
      evaluated.push_back(Evaluate(sums, previous, indices[k], next, options.min_segment));
    }
    int weakest = -1;
    for (size_t k = 0; k < evaluated.size(); ++k) {
      if (!Fails(evaluated[k], options)) continue;
      const Candidate& c = evaluated[k];
      if (weakest < 0 || c.p_value > evaluated[weakest].p_value ||
          (c.p_value == evaluated[weakest].p_value &&
           std::fabs(c.relative_change) <= std::fabs(evaluated[weakest].relative_change))) {
        weakest = static_cast<int>(k);
      }
    }
    if (weakest < 0) return evaluated;
    indices.erase(indices.begin() + weakest);
  }
}

}  // namespace

absl::Status ValidateChangePointOptions(const ChangePointOptions& options) {
  if (options.min_segment < 2) {
    return absl::InvalidArgumentError(absl::StrFormat("min_segment %d: must be >= 2", options.min_segment));
  }
  if (options.window < 2 * options.min_segment) {
    return absl::InvalidArgumentError(absl::StrFormat("window %d: must be >= 2 * min_segment (%d)",
                                                      options.window, 2 * options.min_segment));
  }
  if (!(options.max_p_value > 0 && options.max_p_value < 1)) {
    return absl::InvalidArgumentError(absl::StrFormat("max_p_value %g: must be in (0, 1)", options.max_p_value));
  }
  if (!std::isfinite(options.min_relative_change) || options.min_relative_change < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("min_relative_change %g: must be finite and >= 0", options.min_relative_change));
  }
  return absl::OkStatus();
}

const char* ChangeDirectionName(ChangeDirection direction) {
  return direction == ChangeDirection::kSlower ? "slower" : "faster";
}

double RegularizedIncompleteBeta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  // The continued fraction converges fast for x < (a + 1) / (a + b + 2); use the symmetry
  // I_x(a, b) = 1 - I_{1-x}(b, a) on the other side.
  if (x > (a + 1) / (a + b + 2)) return 1 - RegularizedIncompleteBeta(b, a, 1 - x);
  const double log_front = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) +
                           b * std::log1p(-x);
  // Lentz's method for the continued fraction 1 / (1 + d1 / (1 + d2 / (1 + ...))).
  constexpr double kTiny = 1e-300;
  constexpr double kEpsilon = 1e-15;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1 / d;
  double f = d;
  for (int m = 1; m <= 500; ++m) {
    const double even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
    d = 1 + even * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1 + even / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    f *= d * c;
    const double odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
    d = 1 + odd * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1 + odd / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double delta = d * c;
    f *= delta;
    if (std::fabs(delta - 1) < kEpsilon) break;
  }
  return std::exp(log_front) * f / a;
}

double WelchTTestPValue(int nx, double mx, double vx, int ny, double my, double vy) {
  if (nx < 2 || ny < 2) return 1;
  const double se_x = vx / nx, se_y = vy / ny;
  const double se = se_x + se_y;
  if (!(se > 0)) return mx == my ? 1.0 : 0.0;
  const double t = (mx - my) / std::sqrt(se);
  const double df = se * se / (se_x * se_x / (nx - 1) + se_y * se_y / (ny - 1));
  return RegularizedIncompleteBeta(df / 2, 0.5, df / (df + t * t));
}

ChangePointDetector::ChangePointDetector(ChangePointOptions options)
    : options_(options), options_status_(ValidateChangePointOptions(options)) {}

absl::Status ChangePointDetector::Append(const std::vector<SeriesPoint>& points) {
  if (!options_status_.ok()) return options_status_;
  if (absl::Status s = ValidatePoints(points, size()); !s.ok()) return s;
  const int old_size = size();
  for (const SeriesPoint& p : points) {
    points_.push_back(p);
    values_.push_back(p.value);
  }
  SearchTailWindows(old_size);
  return absl::OkStatus();
}

void ChangePointDetector::SearchTailWindows(int old_size) {
  const int n = size();
  // A window complete at old_size points saw all its points then: keep its splits.
  for (auto it = window_splits_.begin(); it != window_splits_.end();) {
    it = it->first + options_.window > old_size ? window_splits_.erase(it) : std::next(it);
  }
  for (int start : WindowStarts(n, options_.window)) {
    if (window_splits_.count(start) > 0) continue;
    std::vector<int>& splits = window_splits_[start];
    DivisiveSearch(values_.data(), start, std::min(n, start + options_.window), options_, &splits);
  }
}

absl::StatusOr<ChangePointResult> ChangePointDetector::Result() const {
  if (!options_status_.ok()) return options_status_;
  const int n = size();
  std::set<int> unique;
  for (const auto& [start, splits] : window_splits_) unique.insert(splits.begin(), splits.end());
  std::vector<int> indices(unique.begin(), unique.end());
  const PrefixSums sums(values_);
  const std::vector<Candidate> kept = PruneCandidates(sums, std::move(indices), n, options_);
  ChangePointResult result;
  for (const Candidate& c : kept) {
    ChangePoint cp;
    cp.index = c.index;
    cp.commit = points_[c.index].commit;
    cp.mean_before = c.before.mean;
    cp.mean_after = c.after.mean;
    cp.relative_change = c.relative_change;
    cp.p_value = c.p_value;
    cp.direction = c.relative_change > 0 ? ChangeDirection::kSlower : ChangeDirection::kFaster;
    result.change_points.push_back(std::move(cp));
  }
  if (!kept.empty()) {
    result.cumulative_change = sums.Stats(kept.back().index, n).mean / sums.Stats(0, kept.front().index).mean - 1;
  }
  return result;
}

absl::StatusOr<ChangePointResult> DetectChangePoints(const std::vector<SeriesPoint>& series,
                                                     const ChangePointOptions& options) {
  ChangePointDetector detector(options);
  if (absl::Status s = detector.Append(series); !s.ok()) return s;
  return detector.Result();
}

}  // namespace fusetune::regress
