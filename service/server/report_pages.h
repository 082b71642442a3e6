// The read-only HTML reports `fusetune serve` answers beside /metrics (the same endpoint,
// the same rules: no token, nothing written), made by the report library from the server's
// database:
//   /reports, /reports/              an index: the tuning report and each suite's history
//   /reports/tuning.html             ReadTuningReport + TuningReportHtml, every device class
//   /reports/history/<suite>.html    ReadHistoryReport + HistoryReportHtml, every cell
// Anything else under /reports/ is NotFound; a suite without bench runs is NotFound. A regress
// run's page is written by the run itself (`fusetune regress --html`): the store keeps its
// verdict rows and bench runs, not the comparison's blocks of both sides.
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
