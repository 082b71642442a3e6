// The SVG line chart of `fusetune history --plot` (and of each cell of `history --html`): a cell's per-commit medians with its change
// points marked. Plain SVG 1.1, no scripts or external resources, viewable in any browser.
//
// The x axis labels the points with their commits (the first 12 characters, as the history
// table shows them; every k-th point only, rotated, when there are too many to fit side by
// side); the y axis has ticks at round values with grid lines, labelled in µs; each change
// point is a dashed line labelled with its commit in full, as stored, and its change. Every
// point carries a tooltip (<title>) with its full commit and median.
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_REPORT_HISTORY_PLOT_H_
#define FUSETUNE_REPORT_HISTORY_PLOT_H_

#include <string>
#include <vector>

namespace fusetune::report {

struct HistoryPlotPoint {
  std::string commit;  // as stored
  double median_us = 0;
  // The point's tooltip after its commit and median (e.g. its date and clocks); may be empty.
  std::string detail;
};

struct HistoryPlotChange {
  int index = 0;               // the series index of the first point at the new level
  std::string commit;          // as stored; drawn in full
  double relative_change = 0;  // mean after / mean before - 1
};

// The chart of `points` (one per commit, oldest first; may be empty) titled `title`.
std::string HistorySvg(const std::string& title, const std::vector<HistoryPlotPoint>& points,
                       const std::vector<HistoryPlotChange>& changes);

// Round tick values covering [low, high]: a step of 1, 2, 2.5 or 5 times a power of ten,
// chosen for about five intervals (4 to 7 ticks), from the largest multiple of the step
// <= low to the smallest >= high. `decimals` is what a label needs to show the step exactly.
// Requires finite low < high.
struct AxisTicks {
  std::vector<double> values;  // ascending; values.front() <= low, values.back() >= high
  double step = 0;
  int decimals = 0;
};
AxisTicks NiceTicks(double low, double high);

}  // namespace fusetune::report

#endif  // FUSETUNE_REPORT_HISTORY_PLOT_H_
