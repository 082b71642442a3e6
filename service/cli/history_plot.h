// The SVG line chart of `fusetune history --plot`: a cell's per-commit medians with its change
// points marked. Plain SVG 1.1, no scripts or external resources, viewable in any browser.
//
// Thread-safety: a pure function.
#ifndef FUSETUNE_SERVICE_CLI_HISTORY_PLOT_H_
#define FUSETUNE_SERVICE_CLI_HISTORY_PLOT_H_

#include <string>
#include <vector>

namespace fusetune::cli {

struct HistoryPlotChange {
  int index = 0;       // the series index of the first point at the new level
  std::string label;   // e.g. "abc1234 +3.1 %"
};

// The chart of `values_us` (one per commit, in order; may be empty) titled `title`, with a
// vertical marker and its label at each change.
std::string HistorySvg(const std::string& title, const std::vector<double>& values_us,
                       const std::vector<HistoryPlotChange>& changes);

}  // namespace fusetune::cli

#endif  // FUSETUNE_SERVICE_CLI_HISTORY_PLOT_H_
