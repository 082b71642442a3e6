// The history report (`fusetune history --html`): per cell of a bench suite (every cell, or
// one), its per-commit series as a line chart (HistorySvg) with the change points marked and
// labelled with their commit and size; each point's tooltip has its commit, median, the run's
// finish date and the SM clocks read around its blocks; each cell's section has the anchor
// the regress report links to (CellAnchor), and links back to a regress page when given.
//
// ReadHistoryReport gathers the series from a Store (only reads) and detects their change
// points; HistoryReportHtml writes the page. The page depends only on the data.
//
// Thread-safety: the functions keep no state; ReadHistoryReport is as safe as its Store.
#ifndef FUSETUNE_REPORT_HISTORY_REPORT_H_
#define FUSETUNE_REPORT_HISTORY_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/db/store.h"
#include "fusetune/regress/change_points.h"
#include "fusetune/regress/history.h"

namespace fusetune::report {

struct HistoryCellReport {
  regress::CellHistory history;       // oldest first
  regress::ChangePointResult changes;
  // Per point (same index as history.points): the SM clocks read around its blocks, MHz
  // (0 and 0 when the backend reads none).
  std::vector<std::pair<int, int>> sm_clock_range_mhz;
};

struct HistoryReport {
  std::string suite;
  std::string source;                    // what the page says it was made from (the database)
  std::vector<HistoryCellReport> cells;  // by device class, then problem key (NaturalLess), then config
  // The regress page each cell links to (its section of a cell is CellAnchor), relative to
  // this page; empty: no links.
  std::string regress_href;
};

// Which cells: `problem_key` empty = every cell of the suite; else that problem's cell
// (`config_key` empty: its only config). `device_class` empty = every device class the suite
// was measured on.
struct HistoryReportQuery {
  std::string suite;
  std::string device_class;
  std::string problem_key;
  std::string config_key;
};

// The cells' histories and change points. NotFound when the suite has no finished bench run
// (on the device class); InvalidArgument as regress::ReadHistory says for an unknown or
// ambiguous cell; the store's and the detector's errors.
absl::StatusOr<HistoryReport> ReadHistoryReport(Store& store, const HistoryReportQuery& query,
                                                const std::string& source);

// The self-contained page (html.h). Never fails.
std::string HistoryReportHtml(const HistoryReport& report);

}  // namespace fusetune::report

#endif  // FUSETUNE_REPORT_HISTORY_REPORT_H_
