#include "fusetune/metrics/metrics_endpoint.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fusetune/wire/address.h"

namespace fusetune {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxRequestBytes = 8192;

std::string Errno(int err) { return std::error_code(err, std::generic_category()).message(); }

// Waits until `fd` is ready for `events` or `deadline` passes; false on timeout or error.
bool WaitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n > 0) return (p.revents & (events | POLLHUP | POLLERR)) != 0;
    if (n < 0 && errno != EINTR) return false;
  }
}

// Sends all of `data` before `deadline`; false when the peer is gone or too slow.
bool SendAll(int fd, std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && WaitFor(fd, POLLOUT, deadline)) continue;
    return false;
  }
  return true;
}

std::string Response(int code, std::string_view reason, std::string_view content_type,
                     const std::string& body, bool include_body) {
  std::string out = absl::StrCat("HTTP/1.1 ", code, " ", std::string(reason), "\r\nContent-Type: ",
                                 std::string(content_type), "\r\nContent-Length: ", body.size(),
                                 "\r\nConnection: close\r\n\r\n");
  if (include_body) out += body;
  return out;
}

std::string PlainResponse(int code, std::string_view reason, std::string_view message) {
  return Response(code, reason, "text/plain; charset=utf-8", std::string(message) + "\n", true);
}

}  // namespace

struct MetricsEndpoint::State {
  int listen_fd = -1;
  int wake_read = -1, wake_write = -1;
  int port = 0;
  std::function<std::string()> render;
  PageHandler pages;  // may be null
  std::thread acceptor;

  std::mutex mu;
  std::condition_variable idle;
  bool stopping = false;
  std::set<int> connections;  // guarded by mu

  ~State() {
    for (int fd : {listen_fd, wake_read, wake_write}) {
      if (fd >= 0) ::close(fd);
    }
  }

  // One request on `fd`, then the connection is closed.
  void Serve(int fd) {
    const std::string reply = Answer(fd);
    if (!reply.empty()) SendAll(fd, reply, Clock::now() + kResponseTimeout);
    std::lock_guard<std::mutex> lock(mu);
    connections.erase(fd);
    ::close(fd);
    idle.notify_all();
  }

  // The response for the request read from `fd`; empty when the client went away or was
  // too slow to deserve one.
  std::string Answer(int fd) {
    const auto deadline = Clock::now() + kRequestTimeout;
    std::string request;
    char buf[2048];
    while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos) {
      if (request.size() > kMaxRequestBytes) {
        return PlainResponse(431, "Request Header Fields Too Large", "request headers over 8 KiB");
      }
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        request.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) return "";
      if (errno == EINTR) continue;
      if ((errno == EAGAIN || errno == EWOULDBLOCK) && WaitFor(fd, POLLIN, deadline)) continue;
      return "";
    }
    // Request line: METHOD SP TARGET SP HTTP/x.y
    const std::string_view line(request.data(), request.find_first_of("\r\n"));
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || line.substr(sp2 + 1).substr(0, 5) != "HTTP/") {
      return PlainResponse(400, "Bad Request", "malformed request line");
    }
    const std::string_view method = line.substr(0, sp1);
    std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    target = target.substr(0, target.find('?'));
    if (method != "GET" && method != "HEAD") {
      return PlainResponse(405, "Method Not Allowed", "only GET and HEAD are served");
    }
    if (pages != nullptr && (target == "/reports" || target.substr(0, 9) == "/reports/")) {
      return PageAnswer(target, method == "GET");
    }
    if (target != "/metrics") return PlainResponse(404, "Not Found", "metrics are served on /metrics");
    std::string body;
    try {
      body = render();
    } catch (const std::exception& e) {
      return PlainResponse(500, "Internal Server Error", absl::StrCat("rendering metrics failed: ", e.what()));
    }
    return Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", body, method == "GET");
  }

  // The response of the page handler for `target` (its %XX escapes decoded).
  std::string PageAnswer(std::string_view target, bool include_body) {
    std::string path;
    for (size_t i = 0; i < target.size(); ++i) {
      if (target[i] != '%') {
        path += target[i];
        continue;
      }
      auto hex = [](char c) {
        return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      };
      const int high = i + 2 < target.size() ? hex(target[i + 1]) : -1;
      const int low = i + 2 < target.size() ? hex(target[i + 2]) : -1;
      if (high < 0 || low < 0) return PlainResponse(400, "Bad Request", "malformed %-escape in the path");
      path += static_cast<char>(high * 16 + low);
      i += 2;
    }
    absl::StatusOr<Page> page;
    try {
      page = pages(path);
    } catch (const std::exception& e) {
      page = absl::InternalError(e.what());
    }
    if (absl::IsNotFound(page.status())) return PlainResponse(404, "Not Found", std::string(page.status().message()));
    if (absl::IsInvalidArgument(page.status())) return PlainResponse(400, "Bad Request", std::string(page.status().message()));
    if (!page.ok()) return PlainResponse(500, "Internal Server Error", std::string(page.status().message()));
    return Response(200, "OK", page->content_type, page->body, include_body);
  }

  void AcceptLoop(const std::shared_ptr<State>& self) {
    while (true) {
      pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake_read, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[1].revents != 0) return;  // stopping
      if ((fds[0].revents & POLLIN) == 0) continue;
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) continue;  // the client left, or a transient EMFILE: keep serving
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stopping || connections.size() >= static_cast<size_t>(kMaxConnections)) {
          SendAll(fd, PlainResponse(503, "Service Unavailable", "too many metrics requests in progress"),
                  Clock::now() + std::chrono::milliseconds(100));
          ::close(fd);
          continue;
        }
        connections.insert(fd);
      }
      try {
        std::thread([self, fd] { self->Serve(fd); }).detach();
      } catch (const std::system_error&) {
        std::lock_guard<std::mutex> lock(mu);
        connections.erase(fd);
        ::close(fd);
        idle.notify_all();
      }
    }
  }
};

MetricsEndpoint::MetricsEndpoint(std::shared_ptr<State> state) : state_(std::move(state)) {}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& address,
                                                                        std::function<std::string()> render) {
  return Start(address, std::move(render), nullptr);
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& address,
                                                                        std::function<std::string()> render,
                                                                        PageHandler pages) {
  absl::StatusOr<HostPort> parsed = ParseHostPort(address, "metrics address", /*listening=*/true, "127.0.0.1:9464");
  if (!parsed.ok()) return parsed.status();
  const std::string& host = parsed->host;
  const std::string port_text = std::to_string(parsed->port);

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on '", address, "': host '", host,
                                               "' does not resolve (", ::gai_strerror(rc), ")"));
  }
  auto state = std::make_shared<State>();
  std::string why = "no usable address";
  for (addrinfo* ai = found; ai != nullptr && state->listen_fd < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      why = absl::StrCat("socket: ", Errno(errno));
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      why = Errno(errno);
      ::close(fd);
      continue;
    }
    if (::listen(fd, 64) != 0) {
      why = absl::StrCat("listen: ", Errno(errno));
      ::close(fd);
      continue;
    }
    state->listen_fd = fd;
  }
  ::freeaddrinfo(found);
  if (state->listen_fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on '", address, "': ", why));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (::getsockname(state->listen_fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on '", address, "': getsockname: ", Errno(errno)));
  }
  state->port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                  : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics: pipe: ", Errno(errno)));
  }
  state->wake_read = pipe_fds[0];
  state->wake_write = pipe_fds[1];
  state->render = std::move(render);
  state->pages = std::move(pages);
  try {
    state->acceptor = std::thread([s = state.get(), state] { s->AcceptLoop(state); });
  } catch (const std::system_error& e) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics: cannot start a thread: ", e.what()));
  }
  return std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(std::move(state)));
}

MetricsEndpoint::~MetricsEndpoint() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stopping = true;
  }
  const char byte = 1;
  while (::write(state_->wake_write, &byte, 1) < 0 && errno == EINTR) {
  }
  if (state_->acceptor.joinable()) state_->acceptor.join();
  std::unique_lock<std::mutex> lock(state_->mu);
  // Connections in progress see end-of-stream at once instead of waiting out their timeouts.
  for (int fd : state_->connections) ::shutdown(fd, SHUT_RDWR);
  state_->idle.wait(lock, [this] { return state_->connections.empty(); });
}

int MetricsEndpoint::port() const { return state_->port; }

}  // namespace fusetune
