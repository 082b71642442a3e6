// Reading series back from a real Prometheus server through its HTTP API, for the
// Prometheus tests. Test support only.
//
// Thread-safety: a pure function (one HTTP request).
#ifndef FUSETUNE_TESTS_PROMETHEUS_PROMETHEUS_QUERY_H_
#define FUSETUNE_TESTS_PROMETHEUS_PROMETHEUS_QUERY_H_

#include <optional>
#include <string>

#include "nlohmann/json.hpp"
#include "testing/http_get.h"

namespace fusetune::testing {

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
