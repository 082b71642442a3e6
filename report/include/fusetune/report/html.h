// The pieces every fusetune HTML report is made of: escaping, stable anchors, number formats
// and the page around a report's body (inline CSS and the one small inline script). A page
// is self-contained (no network at view time: no external style, script, font or image) and
// written as well-formed XML as well as HTML5, so that a strict XML reader can check it.
//
// Determinism: nothing here reads the clock or the environment; the same inputs give the same
// bytes.
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_REPORT_HTML_H_
#define FUSETUNE_REPORT_HTML_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace fusetune::report {

// `text` with &, <, >, " and ' replaced by entity references (regress::XmlEscape; control
// characters other than tab and newlines become '?'): safe in element text and in attribute
// values (single- or double-quoted) alike.
std::string HtmlEscape(std::string_view text);

// A fragment identifier for `text` (a cell, a problem): "<prefix>-" followed by `text` with
// every character outside [a-z0-9] as '-', then '-' and 8 hex digits of a hash of `text`, so
// that two texts that differ only in punctuation get different anchors. The same text gives
// the same anchor in every report: links between pages rely on it.
std::string AnchorId(std::string_view prefix, std::string_view text);

// The anchor of a bench cell ("PROBLEM_KEY CONFIG_KEY"): what the regress report and the
// history report both use, so each can link to the other's section of a cell.
std::string CellAnchor(std::string_view problem_key, std::string_view config_key);

// A number for a reader: `digits` significant digits, no exponent between 1e-3 and 1e7
// ("1234", "12.3", "0.00123"); "-" for NaN and infinities.
std::string FormatNumber(double value, int digits = 3);

// What one page holds besides its body.
struct HtmlPage {
  std::string title;      // <title> and the page's <h1>, escaped by RenderPage
  std::string subtitle;   // a line under the title (escaped), e.g. what the page was made from
  std::string body_html;  // already escaped HTML: the report's sections
};

// The whole document: <!DOCTYPE html>, a <head> with the charset, the title and the shared
// inline CSS, the body, and the inline script that makes every table of class "sortable"
// sortable by a click on its header (numbers by the cells' data-sort value when present)
// and marks <body data-script="ok"> when it ran (data-script-error="..." when a script on the
// page failed), which the browser test reads.
std::string RenderPage(const HtmlPage& page);

// Writes `text` to `path` whole or not at all: into "<path>.tmp", then renamed over `path`
// (missing parent directories are created), so a reader never sees half a report.
// Unavailable naming the file when it cannot be written.
absl::Status WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace fusetune::report

#endif  // FUSETUNE_REPORT_HTML_H_
