// The read-only HTML reports `fusetune serve` answers beside /metrics (the same endpoint,
// the same rules: no token, nothing written), made by the report library from the server's
// database:
//   /reports, /reports/              an index: the tuning report and each suite's history
//   /reports/tuning.html             ReadTuningReport + TuningReportHtml, every device class
//   /reports/history/<suite>.html    ReadHistoryReport + HistoryReportHtml, every cell
//   /reports/regress/<commit>.html   ReadStoredRegressReport + RegressReportHtml: the newest
//                                    stored verdicts of the commit, each cell linked to the
//                                    suite's history page
// Anything else under /reports/ is NotFound, as is a suite without bench runs or a commit
// without stored verdicts. The stored verdicts lack what only the run knew (the floors, the
// intervals, why a cell is unknown): the run's own page (`fusetune regress --html`) has them.
//
// Thread-safety: the handler is called from the endpoint's connection threads concurrently;
// it only reads through `store`, which is thread-safe.
#ifndef FUSETUNE_SERVICE_SERVER_REPORT_PAGES_H_
#define FUSETUNE_SERVICE_SERVER_REPORT_PAGES_H_

#include <memory>
#include <string>

#include "fusetune/db/store.h"
#include "fusetune/metrics/metrics_endpoint.h"

namespace fusetune {

// The handler over `store` (kept alive by the handler); `source` names the database on the
// pages.
MetricsEndpoint::PageHandler ReportPages(std::shared_ptr<Store> store, std::string source);

}  // namespace fusetune

#endif  // FUSETUNE_SERVICE_SERVER_REPORT_PAGES_H_
