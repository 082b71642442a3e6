// Change points in a per-commit history: the E-divisive means detector with a t-test
// significance rule (the method of Apache Otava, formerly Hunter).
//
// The input is a series of per-commit times in commit order (one value per commit, e.g. the
// median of a cell's block medians in each bench run). The detector finds the indices where
// the series' mean shifts:
//   1. Windows. The series is cut into windows of `window` points starting every window/2
//      points (the last ones partial). In each window the divisive search splits a segment at
//      the point that maximises the energy (mean pairwise distance) statistic
//        Q(t) = t (n-t) / n * (2 E|x-y| - E|x-x'| - E|y-y'|)
//      (x left of t, y right of it) and accepts the split when a two-sample Welch t-test of
//      the two sides gives p <= max_p_value; accepted splits are searched again on each side.
//   2. Pruning. The union of the windows' splits is tested again, each against the segments
//      between it and its neighbouring candidates; while any p-value exceeds max_p_value (or
//      the relative change is below min_relative_change), the weakest candidate is removed
//      and its neighbours retested. The survivors are the change points.
// The windows keep the search local (a long history of small shifts does not hide a step),
// and the pruning keeps one change point per shift where overlapping windows found it twice.
// A slow drift of steps each too small to pass the test alone is found where a window holds
// enough of it; the cumulative change over the series is reported beside the change points.
//
// Bad input: a NaN, infinite or non-positive value is InvalidArgument; a series shorter than
// 2 * min_segment points has no change points (an OK, empty result), as has a constant one.
//
// Thread-safety: DetectChangePoints is a pure function. A ChangePointDetector is not
// thread-safe; guard it externally when shared.
#ifndef FUSETUNE_REGRESS_CHANGE_POINTS_H_
#define FUSETUNE_REGRESS_CHANGE_POINTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fusetune::regress {

struct ChangePointOptions {
  // Points per search window (Otava's default); windows start every window/2 points.
  int window = 50;
  // A split is accepted when the two-sided Welch t-test of its sides gives p <= this.
  double max_p_value = 0.001;
  // A change point is kept only when |mean_after / mean_before - 1| >= this (0 = any size).
  double min_relative_change = 0;
  // The fewest points on either side of a split.
  int min_segment = 3;
};

// Checks the options: window >= 2 * min_segment, min_segment >= 2, 0 < max_p_value < 1 and
// min_relative_change >= 0 and finite. InvalidArgument otherwise.
absl::Status ValidateChangePointOptions(const ChangePointOptions& options);

// One value of the series: the commit it was measured at and its time (any unit, > 0).
struct SeriesPoint {
  std::string commit;
  double value = 0;
};

enum class ChangeDirection { kSlower, kFaster };
// "slower" / "faster".
const char* ChangeDirectionName(ChangeDirection direction);

struct ChangePoint {
  int index = 0;                // the first point after the change
  std::string commit;           // that point's commit: the first commit measured at the new level
  double mean_before = 0;       // mean of the segment from the previous change point to index
  double mean_after = 0;        // mean of the segment from index to the next change point
  double relative_change = 0;   // mean_after / mean_before - 1 (> 0: slower, for times)
  double p_value = 1;           // Welch t-test of those two segments, two-sided
  ChangeDirection direction = ChangeDirection::kSlower;
};

struct ChangePointResult {
  std::vector<ChangePoint> change_points;  // in index order
  // mean of the last segment / mean of the first segment - 1: a drift's total size when its
  // steps are found as fewer, larger change points (0 without change points).
  double cumulative_change = 0;
};

// The change points of `series` (in commit order). InvalidArgument for bad options or a
// value that is NaN, infinite or <= 0; OK with no change points for a short series.
absl::StatusOr<ChangePointResult> DetectChangePoints(const std::vector<SeriesPoint>& series,
                                                     const ChangePointOptions& options = {});

// The detector for a series that grows as commits are measured: Append adds points and
// Result gives the same change points DetectChangePoints would give for the whole series.
//
// Cost: the windows that were complete before an Append keep their splits; only the windows
// overlapping the last `window` points and the new ones are searched again, O(window^2) each,
// so appending a points costs O((a + window) * window) for the search plus O(n + k^2) for
// the pruning over prefix sums (k candidates), instead of O(n * window) for a fresh detection.
class ChangePointDetector {
 public:
  // InvalidArgument for bad options (then every later call fails the same way).
  explicit ChangePointDetector(ChangePointOptions options = {});

  // Appends points in commit order. InvalidArgument (nothing appended) for a value that is
  // NaN, infinite or <= 0, or for bad options.
  absl::Status Append(const std::vector<SeriesPoint>& points);

  // The change points of everything appended so far (see DetectChangePoints).
  absl::StatusOr<ChangePointResult> Result() const;

  int size() const { return static_cast<int>(points_.size()); }

 private:
  // Re-searches the windows that are incomplete at `old_size` points or start after it.
  void SearchTailWindows(int old_size);

  ChangePointOptions options_;
  absl::Status options_status_;
  std::vector<SeriesPoint> points_;
  std::vector<double> values_;
  // Split indices found in each window, keyed by the window's start.
  std::map<int, std::vector<int>> window_splits_;
};

// The two-sided p-value of Welch's two-sample t-test of x (size nx, mean mx, variance vx)
// against y; 1 when either side has fewer than 2 points, 0 or 1 for two constant sides
// (different or equal means).
double WelchTTestPValue(int nx, double mx, double vx, int ny, double my, double vy);

// The regularised incomplete beta function I_x(a, b) for a, b > 0 and x in [0, 1].
double RegularizedIncompleteBeta(double a, double b, double x);

}  // namespace fusetune::regress

#endif  // FUSETUNE_REGRESS_CHANGE_POINTS_H_
