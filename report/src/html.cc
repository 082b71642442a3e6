#include "fusetune/report/html.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "fmt/format.h"
#include "fusetune/regress/junit.h"

namespace fusetune::report {
namespace {

// Kept free of '<' and '&' so that the page stays well-formed XML with the script inline and
// unescaped (a CDATA section would not survive HTML parsing). Errors of any script on the page
// are written to the body so that a headless browser's DOM dump shows them.
constexpr char kScript[] = R"js(
window.addEventListener("error", function (event) {
  document.body.setAttribute("data-script-error", String(event.message));
});
function sortKey(row, column) {
  var cell = row.cells[column];
  var key = cell.getAttribute("data-sort");
  return key === null ? cell.textContent.trim() : key;
}
function compareKeys(x, y) {
  var nx = Number(x), ny = Number(y);
  if (x.trim() === "" || y.trim() === "" || isNaN(nx) || isNaN(ny)) {
    return x.localeCompare(y, undefined, {numeric: true});
  }
  return nx - ny;
}
document.querySelectorAll("table.sortable").forEach(function (table) {
  var headers = table.querySelectorAll("thead th");
  headers.forEach(function (header, column) {
    header.setAttribute("title", "click to sort");
    header.addEventListener("click", function () {
      var body = table.tBodies[0];
      var rows = Array.from(body.rows);
      var descending = header.getAttribute("aria-sort") === "ascending";
      rows.sort(function (a, b) {
        var order = compareKeys(sortKey(a, column), sortKey(b, column));
        return descending ? -order : order;
      });
      headers.forEach(function (h) { h.removeAttribute("aria-sort"); });
      header.setAttribute("aria-sort", descending ? "descending" : "ascending");
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
document.body.setAttribute("data-script", "ok");
)js";

constexpr char kStyle[] = R"css(
body { font-family: sans-serif; font-size: 14px; margin: 16px 24px; color: #1a1a1a; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px 0; }
h2 { font-size: 17px; margin: 28px 0 6px 0; border-bottom: 1px solid #ccc; padding-bottom: 3px; }
h3 { font-size: 15px; margin: 18px 0 4px 0; }
.subtitle { color: #555; margin-bottom: 12px; }
table { border-collapse: collapse; margin: 6px 0 10px 0; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
table.sortable th { cursor: pointer; }
table.sortable th[aria-sort="ascending"]::after { content: " \25B2"; }
table.sortable th[aria-sort="descending"]::after { content: " \25BC"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
code, .key { font-family: monospace; font-size: 12px; }
.note { color: #555; font-size: 12px; }
.panels { display: flex; flex-wrap: wrap; gap: 10px; align-items: flex-start; }
.variant-rows { display: flex; flex-wrap: wrap; gap: 8px 28px; align-items: flex-start; }
.variant-row h5 { margin: 4px 0; font-size: 13px; }
.overview { display: flex; flex-wrap: wrap; gap: 8px 40px; align-items: flex-start; }
.overview h4 { margin: 4px 0; }
figure { margin: 0; }
figcaption { font-size: 12px; color: #333; }
td.nowrap, td.key { white-space: nowrap; }
td.key.wrap { white-space: normal; }
.verdict-regressed { color: #b00020; font-weight: bold; }
.verdict-improved { color: #1b7f3b; font-weight: bold; }
.verdict-unknown { color: #a36200; font-weight: bold; }
.verdict-same { color: #555; }
.accuracy-failed { color: #b00020; font-weight: bold; }
section.cell { margin-bottom: 18px; }
dl.summary { max-width: 640px; }
dl.env { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; margin: 4px 0; }
dl.env dt { color: #555; }
dl.env dd { margin: 0; font-family: monospace; font-size: 12px; }
svg text { font-family: sans-serif; }
)css";

}  // namespace

// The pages are well-formed XML too (tests parse them strictly), so XML's escaping is the one
// definition: the five special characters, and control characters XML cannot hold.
std::string HtmlEscape(std::string_view text) { return regress::XmlEscape(text); }

std::string AnchorId(std::string_view prefix, std::string_view text) {
  uint32_t hash = 2166136261u;  // FNV-1a: stable across builds and hosts
  std::string readable;
  for (char c : text) {
    hash = (hash ^ static_cast<unsigned char>(c)) * 16777619u;
    const bool keep = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    const bool upper = c >= 'A' && c <= 'Z';
    readable += keep ? c : upper ? static_cast<char>(c - 'A' + 'a') : '-';
  }
  return fmt::format("{}-{}-{:08x}", prefix, readable, hash);
}

std::string CellAnchor(std::string_view problem_key, std::string_view config_key) {
  return AnchorId("cell", fmt::format("{} {}", problem_key, config_key));
}

std::string FormatNumber(double value, int digits) {
  if (!std::isfinite(value)) return "-";
  const double magnitude = std::abs(value);
  if (magnitude != 0 && (magnitude < 1e-3 || magnitude >= 1e7)) return fmt::format("{:.{}e}", value, digits - 1);
  const int integer_digits = magnitude < 1 ? 1 : static_cast<int>(std::floor(std::log10(magnitude))) + 1;
  int decimals = std::max(0, digits - integer_digits);
  if (magnitude != 0 && magnitude < 1) decimals = digits - 1 - static_cast<int>(std::floor(std::log10(magnitude)));
  return fmt::format("{:.{}f}", value, decimals);
}

std::string RenderPage(const HtmlPage& page) {
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n";
  html += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n";
  html += fmt::format("<title>{}</title>\n<style>{}</style>\n</head>\n<body>\n", HtmlEscape(page.title), kStyle);
  html += fmt::format("<h1>{}</h1>\n", HtmlEscape(page.title));
  if (!page.subtitle.empty()) html += fmt::format("<div class=\"subtitle\">{}</div>\n", HtmlEscape(page.subtitle));
  html += page.body_html;
  html += fmt::format("<script>{}</script>\n</body>\n</html>\n", kScript);
  return html;
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) return absl::UnavailableError(fmt::format("cannot write {}", tmp));
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::UnavailableError(fmt::format("cannot write {}: {}", path, ec.message()));
  return absl::OkStatus();
}

}  // namespace fusetune::report
