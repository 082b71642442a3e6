// The colour scale and SVG pieces the report pages share (internal to the report library).
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_REPORT_SRC_HEATMAP_H_
#define FUSETUNE_REPORT_SRC_HEATMAP_H_

#include <string>

namespace fusetune::report::internal {

// The fill for a time on a log scale between the fastest and the slowest time shown: green
// (fastest) through yellow to red (slowest); "#888888" when the range is empty or bad.
std::string TimeColour(double us, double fastest_us, double slowest_us);

// An SVG legend of the scale: a gradient bar labelled with the fastest and the slowest time,
// and the marks of the outcomes that are not timed. `id` must be unique on the page (the
// gradient's id).
std::string TimeLegendSvg(const std::string& id, double fastest_us, double slowest_us);

}  // namespace fusetune::report::internal

#endif  // FUSETUNE_REPORT_SRC_HEATMAP_H_
