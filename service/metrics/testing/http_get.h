// A minimal blocking HTTP/1.0 GET over a TCP socket, for tests that read /metrics or the
// Prometheus server's HTTP API without pulling in an HTTP library.
//
// Thread-safety: a pure function.
#ifndef FUSETUNE_SERVICE_SERVER_TESTING_HTTP_GET_H_
#define FUSETUNE_SERVICE_SERVER_TESTING_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"

namespace fusetune::testing {

struct HttpResponse {
  int status = 0;     // e.g. 200
  std::string body;   // everything after the header block
};

// GET http://127.0.0.1:<port><path_and_query>. Unavailable when the connection fails,
// DeadlineExceeded after `timeout_ms`, Internal on a malformed reply.
absl::StatusOr<HttpResponse> HttpGet(int port, const std::string& path_and_query, int timeout_ms = 5000);

// Percent-encodes a query parameter value (RFC 3986 unreserved characters kept).
std::string UrlEncode(const std::string& value);

}  // namespace fusetune::testing

#endif  // FUSETUNE_SERVICE_SERVER_TESTING_HTTP_GET_H_
