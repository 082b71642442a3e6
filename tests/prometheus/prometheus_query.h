// Starting the real Prometheus server and reading series back through its HTTP API, for the
// Prometheus tests. Test support only.
//
// Thread-safety: the queries are pure functions (one HTTP request each).
#ifndef FUSETUNE_TESTS_PROMETHEUS_PROMETHEUS_QUERY_H_
#define FUSETUNE_TESTS_PROMETHEUS_PROMETHEUS_QUERY_H_

#include <algorithm>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/ports.h"
#include "common/subprocess.h"
#include "nlohmann/json.hpp"
#include "testing/http_get.h"

namespace fusetune::testing {

inline constexpr char kPrometheusBinary[] = "/usr/bin/prometheus";

// A Prometheus server scraping each (job name, 127.0.0.1 port) of `jobs` every second (a job
// named more than once scrapes each of its ports as one more target, as several replicas are
// listed), with its configuration, data and logs under `dir`, listening on a free loopback port
// (set in *port). Check started() on the result.
inline std::unique_ptr<Subprocess> StartPrometheus(const TempDir& dir, const std::vector<std::pair<std::string, int>>& jobs,
                                                   int* port) {
  *port = FreeLoopbackPort();
  {
    std::vector<std::pair<std::string, std::string>> targets;  // job, its targets, in first-named order
    for (const auto& [job, target_port] : jobs) {
      auto it = std::find_if(targets.begin(), targets.end(), [&](const auto& t) { return t.first == job; });
      if (it == targets.end()) it = targets.insert(targets.end(), {job, ""});
      it->second += (it->second.empty() ? "'127.0.0.1:" : ", '127.0.0.1:") + std::to_string(target_port) + "'";
    }
    std::ofstream config(dir.File("prometheus.yml"));
    config << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n";
    for (const auto& [job, list] : targets) {
      config << "  - job_name: " << job << "\n    static_configs:\n      - targets: [" << list << "]\n";
    }
  }
  return std::make_unique<Subprocess>(
      std::vector<std::string>{kPrometheusBinary, "--config.file=" + dir.File("prometheus.yml"),
                               "--storage.tsdb.path=" + dir.File("data"),
                               "--web.listen-address=127.0.0.1:" + std::to_string(*port), "--log.level=warn"},
      dir.path());
}

// The result of a successful query (data.result: for an instant query a vector of
// {"metric": {labels}, "value": [t, "v"]}); nullopt and the reason in *error when the server
// answered with an error (e.g. a query that does not parse) or not at all. `path_and_query`
// is e.g. "/api/v1/query?query=" + UrlEncode(promql).
inline std::optional<nlohmann::json> PrometheusResult(int prometheus_port, const std::string& path_and_query,
                                                      std::string* error) {
  auto r = HttpGet(prometheus_port, path_and_query);
  if (!r.ok()) {
    *error = r.status().ToString();
    return std::nullopt;
  }
  auto j = nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (r->status != 200 || j.is_discarded() || j.value("status", "") != "success") {
    *error = "HTTP " + std::to_string(r->status) + ": " + r->body;
    return std::nullopt;
  }
  return j["data"]["result"];
}

// Value of the single sample the instant query `promql` returns on the Prometheus server at
// 127.0.0.1:`prometheus_port`; nullopt when there is none (yet) or the query failed.
inline std::optional<double> QueryScalar(int prometheus_port, const std::string& promql) {
  auto r = HttpGet(prometheus_port, "/api/v1/query?query=" + UrlEncode(promql));
  if (!r.ok() || r->status != 200) return std::nullopt;
  auto j = nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || j.value("status", "") != "success") return std::nullopt;
  const auto& result = j["data"]["result"];
  if (!result.is_array() || result.size() != 1) return std::nullopt;
  return std::stod(result[0]["value"][1].get<std::string>());
}

}  // namespace fusetune::testing

#endif  // FUSETUNE_TESTS_PROMETHEUS_PROMETHEUS_QUERY_H_
