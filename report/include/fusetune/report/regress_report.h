// The regress report (`fusetune regress --html`): the verdicts of one comparison of two builds
// on a bench suite, most severe first; per cell both builds' block times as strip plots on one
// axis with the ratio and its interval, the floor it was judged against and, for an unknown
// cell, why; the accuracy findings; each cell linked to its section of the history page.
//
// RegressReportFromComparison takes what a regress run measured (regress::Comparison);
// RegressReportHtml writes the page. The page depends only on the data.
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_REPORT_REGRESS_REPORT_H_
#define FUSETUNE_REPORT_REGRESS_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/db/store.h"
#include "fusetune/regress/block_source.h"
#include "fusetune/regress/compare.h"
#include "fusetune/regress/suite.h"
#include "fusetune/regress/verdict.h"

namespace fusetune::report {

// One compared cell.
struct RegressCell {
  std::string name;         // SuiteCell::Name(): "PROBLEM CONFIG" (a pick cell adds the old pick)
  std::string problem_key;
  std::string config_key;   // the candidate's config
  std::string role;         // why the cell is in the suite ("best", "pick", ...)
  regress::CellVerdict verdict;
  regress::CellCheck baseline_check;   // each build's verification of the cell
  regress::CellCheck candidate_check;
  std::vector<double> baseline_us;     // block medians in measurement order, microseconds
  std::vector<double> candidate_us;
};

struct RegressReport {
  std::string suite;
  std::string device_class;
  regress::SourceInfo baseline;   // commit, device, environment of each build
  regress::SourceInfo candidate;
  bool interleaved = false;       // false: against the baseline's stored blocks
  bool calibration = false;       // an A/A calibration (the same build on both sides)
  std::vector<RegressCell> cells; // in suite order; the page sorts them by severity
  std::vector<std::string> notes; // what the run said besides the verdicts
  int blocks_measured = 0;
  double measure_seconds = 0;
  // Made from the store's verdict rows (ReadStoredRegressReport), not from the run: the
  // interval, the floor, the adjusted p-values of both directions and the reasons are not
  // stored, and the page says so instead of showing them.
  bool from_store = false;
  // The history page the cells link to (its section of a cell is CellAnchor), relative to
  // this page; empty: no links.
  std::string history_href;
};

// The report of `comparison` of `suite`; `notes` and `calibration` as the run reported them.
RegressReport RegressReportFromComparison(const regress::Suite& suite, const regress::Comparison& comparison,
                                          const std::vector<std::string>& notes, bool calibration);

// The newest comparison stored for `commit` (canonical): its verdict rows (ListRegressions;
// of the newest row's baseline and device class; the "planted_latency" rows of method checks
// left out) with both builds' block medians from the suites' bench runs at `commit` and at the
// baseline, where stored. NotFound when no verdict of `commit` is stored; the store's errors.
absl::StatusOr<RegressReport> ReadStoredRegressReport(Store& store, const std::string& commit);

// The self-contained page (html.h). Never fails: a cell with no blocks on a side (it failed
// verification, or the stored run lacks it) is drawn with what there is and says so.
std::string RegressReportHtml(const RegressReport& report);

}  // namespace fusetune::report

#endif  // FUSETUNE_REPORT_REGRESS_REPORT_H_
