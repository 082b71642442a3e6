// Reports of a suite's verdicts for CI: JUnit XML (read by the GitLab, Jenkins and GitHub test
// reporters) and a markdown table sorted by severity.
//
// JUnit: one <testcase> per cell, named "<problem key> <config key>" (classname: the problem
// key); a <failure> for a cell that Failed() (type "regressed", "accuracy" or "error-growth"),
// a <skipped> for an unknown cell; properties ratio (RatioEstimate::pairwise_ratio, the one
// ratio every report and stored row gives), ratio_of_medians, ci_lower, ci_upper, confidence,
// floor, p_slower, p_slower_adjusted, verdict, blocks.
//
// Markdown: one row per cell, most severe first: regressed (largest ratio first), accuracy
// failures, error growth, unknown, improved, same; with each cell's ratio, interval and floor,
// then each unknown cell's reason (CellVerdict::why).
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_REGRESS_JUNIT_H_
#define FUSETUNE_REGRESS_JUNIT_H_

#include <string>
#include <string_view>
#include <vector>

#include "fusetune/regress/verdict.h"

namespace fusetune::regress {

// Escapes text for XML 1.0 content and attribute values: & < > " ' become entities; control
// characters XML 1.0 cannot hold (below 0x20 except tab, newline, carriage return) become '?'.
std::string XmlEscape(std::string_view text);

// A name and value the <testsuite> carries as a property (e.g. what a method check planted).
struct SuiteProperty {
  std::string name;
  std::string value;
};

// The JUnit XML document of `verdicts` as one <testsuite> named `suite_name`, with
// `suite_properties` (if any) in its own <properties>.
std::string WriteJUnitXml(std::string_view suite_name, const std::vector<CellVerdict>& verdicts,
                          const std::vector<SuiteProperty>& suite_properties = {});

// Severity rank used by the markdown report: 0 for the most severe.
int SeverityRank(const CellVerdict& verdict);

// The markdown report: a heading with `title`, counts per verdict, the sorted table and the
// reasons of unknown cells. Table cells and reasons escape '|', '`', '<', '>' and newlines so
// that keys cannot break the table.
std::string WriteMarkdownReport(std::string_view title, const std::vector<CellVerdict>& verdicts);

}  // namespace fusetune::regress

#endif  // FUSETUNE_REGRESS_JUNIT_H_
