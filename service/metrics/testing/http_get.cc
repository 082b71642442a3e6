#include "http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace fusetune::testing {

absl::StatusOr<HttpResponse> HttpGet(int port, const std::string& path_and_query, int timeout_ms) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(std::string("socket: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError("connect to 127.0.0.1:" + std::to_string(port) + ": " + std::strerror(errno));
  }
  const std::string request = "GET " + path_and_query + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return absl::UnavailableError(std::string("send: ") + std::strerror(errno));
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[8192];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return absl::DeadlineExceededError("HTTP GET timed out");
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno != EINTR) return absl::InternalError(std::string("poll: ") + std::strerror(errno));
    if (ready <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0) return absl::UnavailableError(std::string("recv: ") + std::strerror(errno));
    if (n == 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  const size_t header_end = raw.find("\r\n\r\n");
  int status = 0;
  if (header_end == std::string::npos || std::sscanf(raw.c_str(), "HTTP/%*s %d", &status) != 1) {
    return absl::InternalError("malformed HTTP reply: " + raw.substr(0, 200));
  }
  HttpResponse r;
  r.status = status;
  r.body = raw.substr(header_end + 4);
  return r;
}

std::string UrlEncode(const std::string& value) {
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

}  // namespace fusetune::testing
