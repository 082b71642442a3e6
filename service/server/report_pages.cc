#include "report_pages.h"

#include <algorithm>
#include <string>
#include <vector>
#include <utility>

#include "fmt/format.h"
#include "fusetune/report/history_report.h"
#include "fusetune/report/regress_report.h"
#include "fusetune/report/html.h"
#include "fusetune/report/tuning_report.h"

namespace fusetune {
namespace {

constexpr char kHtml[] = "text/html; charset=utf-8";
constexpr char kHistoryPrefix[] = "/reports/history/";
constexpr char kRegressPrefix[] = "/reports/regress/";
// Commits with stored verdicts the index lists, newest first.
constexpr size_t kCommitsListed = 30;
constexpr char kHtmlSuffix[] = ".html";

// A path segment for a link: every byte outside [A-Za-z0-9._-] as %XX (the endpoint decodes
// them back before the handler sees the path).
std::string PathSegment(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                       c == '_' || c == '-';
    out += plain ? std::string(1, static_cast<char>(c)) : fmt::format("%{:02X}", c);
  }
  return out;
}

absl::StatusOr<MetricsEndpoint::Page> IndexPage(Store& store, const std::string& source) {
  absl::StatusOr<std::vector<std::string>> suites = store.ListBenchSuites();
  if (!suites.ok()) return suites.status();
  std::string body = "<ul class=\"reports\">\n<li><a href=\"/reports/tuning.html\">tuning report</a>: every best "
                     "config with its config space, variants, % of peak and audit regret</li>\n";
  for (const std::string& suite : *suites) {
    body += fmt::format("<li><a href=\"{}{}{}\">history of suite {}</a>: every cell's series with its change "
                        "points</li>\n",
                        kHistoryPrefix, report::HtmlEscape(PathSegment(suite)), kHtmlSuffix, report::HtmlEscape(suite));
  }
  absl::StatusOr<std::vector<Regression>> rows = store.ListRegressions("", 100000);
  if (!rows.ok()) return rows.status();
  std::vector<std::string> commits;
  for (const Regression& row : *rows) {
    if (row.metric == "planted_latency" || commits.size() >= kCommitsListed) continue;
    if (std::find(commits.begin(), commits.end(), row.commit) == commits.end()) commits.push_back(row.commit);
  }
  for (const std::string& commit : commits) {
    body += fmt::format("<li><a href=\"{}{}{}\">verdicts of commit {}</a> (as stored)</li>\n", kRegressPrefix,
                        report::HtmlEscape(PathSegment(commit)), kHtmlSuffix, report::HtmlEscape(commit));
  }
  body += "</ul>\n<p class=\"note\">A regress run's own page, with its floors and the reasons of unknown cells, is "
          "written by the run: <code>fusetune regress --html FILE</code>.</p>\n";
  return MetricsEndpoint::Page{kHtml, report::RenderPage({"fusetune reports", "from " + source, body})};
}

}  // namespace

MetricsEndpoint::PageHandler ReportPages(std::shared_ptr<Store> store, std::string source) {
  return [store = std::move(store), source = std::move(source)](
             const std::string& path) -> absl::StatusOr<MetricsEndpoint::Page> {
    if (path == "/reports" || path == "/reports/" || path == "/reports/index.html") return IndexPage(*store, source);
    if (path == "/reports/tuning.html") {
      absl::StatusOr<report::TuningReport> tuning = report::ReadTuningReport(*store, "", source);
      if (!tuning.ok()) return tuning.status();
      return MetricsEndpoint::Page{kHtml, report::TuningReportHtml(*tuning)};
    }
    const std::string prefix = kHistoryPrefix, suffix = kHtmlSuffix;
    if (path.size() > prefix.size() + suffix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
        path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const std::string suite = path.substr(prefix.size(), path.size() - prefix.size() - suffix.size());
      absl::StatusOr<report::HistoryReport> history = report::ReadHistoryReport(*store, {suite, "", "", ""}, source);
      if (!history.ok()) return history.status();
      return MetricsEndpoint::Page{kHtml, report::HistoryReportHtml(*history)};
    }
    const std::string regress_prefix = kRegressPrefix;
    if (path.size() > regress_prefix.size() + suffix.size() && path.compare(0, regress_prefix.size(), regress_prefix) == 0 &&
        path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const std::string commit =
          path.substr(regress_prefix.size(), path.size() - regress_prefix.size() - suffix.size());
      absl::StatusOr<report::RegressReport> regress = report::ReadStoredRegressReport(*store, commit);
      if (!regress.ok()) return regress.status();
      regress->history_href = kHistoryPrefix + PathSegment(regress->suite) + suffix;
      return MetricsEndpoint::Page{kHtml, report::RegressReportHtml(*regress)};
    }
    return absl::NotFoundError(fmt::format("no report at {}: see /reports/", path));
  };
}

}  // namespace fusetune
