#include "fusetune/metrics/metrics_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "testing/http_get.h"

namespace fusetune {
namespace {

// A connected loopback socket, closed on destruction.
class Client {
 public:
  explicit Client(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~Client() { ::close(fd_); }
  bool connected() const { return connected_; }
  void Send(const std::string& bytes) { ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL); }
  // Everything the server sends until it closes (or 30 s pass).
  std::string ReadAll() {
    std::string out;
    char buf[4096];
    while (true) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 30000) <= 0) break;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  int fd_;
  bool connected_ = false;
};

std::string Exchange(int port, const std::string& request) {
  Client c(port);
  if (!c.connected()) return "not connected";
  c.Send(request);
  return c.ReadAll();
}

TEST(MetricsEndpoint, ServesTheRenderedTextOnMetrics) {
  std::atomic<int> renders{0};
  auto endpoint = MetricsEndpoint::Start("127.0.0.1:0", [&] {
    ++renders;
    return std::string("# TYPE up gauge\nup 1\n");
  });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  ASSERT_GT((*endpoint)->port(), 0);
  auto got = testing::HttpGet((*endpoint)->port(), "/metrics?name[]=x", 30000);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(got->body, "# TYPE up gauge\nup 1\n");
  EXPECT_EQ(renders.load(), 1);
  const std::string raw = Exchange((*endpoint)->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(raw.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << raw;
  EXPECT_NE(raw.find("Content-Length: 21\r\n"), std::string::npos) << raw;
}

TEST(MetricsEndpoint, AnswersOtherRequestsWithHttpErrors) {
  auto endpoint = MetricsEndpoint::Start("127.0.0.1:0", [] { return std::string("up 1\n"); });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  EXPECT_EQ(testing::HttpGet(port, "/", 30000)->status, 404);
  EXPECT_EQ(Exchange(port, "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(Exchange(port, "garbage\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(Exchange(port, "GET /metrics" + std::string(10000, 'x')).rfind("HTTP/1.1 431", 0), 0u);
  const std::string head = Exchange(port, "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "");  // headers only
}

TEST(MetricsEndpoint, ServesPagesUnderReportsWithTheHandlersAnswer) {
  std::vector<std::string> asked;
  std::mutex mu;
  auto endpoint = MetricsEndpoint::Start(
      "127.0.0.1:0", [] { return std::string("up 1\n"); },
      [&](const std::string& path) -> absl::StatusOr<MetricsEndpoint::Page> {
        std::lock_guard<std::mutex> lock(mu);
        asked.push_back(path);
        if (path == "/reports/missing") return absl::NotFoundError("no such report");
        if (path == "/reports/bad") return absl::InvalidArgumentError("bad name");
        return MetricsEndpoint::Page{"text/html; charset=utf-8", "<p>" + path + "</p>"};
      });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  auto page = testing::HttpGet(port, "/reports/history/a%20b.html?x=1", 30000);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->body, "<p>/reports/history/a b.html</p>");
  EXPECT_EQ(testing::HttpGet(port, "/reports", 30000)->status, 200);
  EXPECT_EQ(testing::HttpGet(port, "/reports/missing", 30000)->status, 404);
  EXPECT_EQ(testing::HttpGet(port, "/reports/bad", 30000)->status, 400);
  EXPECT_EQ(testing::HttpGet(port, "/reports/%zz", 30000)->status, 400);
  EXPECT_EQ(testing::HttpGet(port, "/reportsx", 30000)->status, 404);  // not under /reports/
  EXPECT_EQ(testing::HttpGet(port, "/metrics", 30000)->body, "up 1\n");
  const std::string raw = Exchange(port, "GET /reports/x HTTP/1.1\r\n\r\n");
  EXPECT_NE(raw.find("Content-Type: text/html; charset=utf-8"), std::string::npos) << raw;
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(asked.size(), 5u);  // %zz never reached the handler
}

TEST(MetricsEndpoint, WithoutAPageHandlerReportsAreNotFound) {
  auto endpoint = MetricsEndpoint::Start("127.0.0.1:0", [] { return std::string("up 1\n"); });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  EXPECT_EQ(testing::HttpGet((*endpoint)->port(), "/reports/tuning.html", 30000)->status, 404);
}

TEST(MetricsEndpoint, ATakenPortSaysSoAndNamesTheAddress) {
  auto first = MetricsEndpoint::Start("127.0.0.1:0", [] { return std::string(); });
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string taken = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = MetricsEndpoint::Start(taken, [] { return std::string(); });
  ASSERT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(taken), std::string::npos) << second.status();
  EXPECT_NE(second.status().message().find("Address already in use"), std::string::npos) << second.status();
}

TEST(MetricsEndpoint, MalformedAddressesAreInvalidArgument) {
  for (const char* bad : {"not-an-address", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:9x", ":9464"}) {
    EXPECT_EQ(MetricsEndpoint::Start(bad, [] { return std::string(); }).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ(MetricsEndpoint::Start("no-such-host.invalid:0", [] { return std::string(); }).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(MetricsEndpoint, ListensOnIpv6LoopbackInBrackets) {
  auto endpoint = MetricsEndpoint::Start("[::1]:0", [] { return std::string(); });
  if (!endpoint.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << endpoint.status();
  EXPECT_GT((*endpoint)->port(), 0);
}

// A client that connects and says nothing must not hold up the scraper behind it, and a
// stopping endpoint must not wait out that client's timeout.
TEST(MetricsEndpoint, ASilentClientDelaysNeitherOtherScrapesNorShutdown) {
  auto endpoint = MetricsEndpoint::Start("127.0.0.1:0", [] { return std::string("up 1\n"); });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  Client silent((*endpoint)->port());
  ASSERT_TRUE(silent.connected());
  auto got = testing::HttpGet((*endpoint)->port(), "/metrics", 30000);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->status, 200);
  endpoint->reset();  // returns without waiting kRequestTimeout for the silent client
  EXPECT_EQ(silent.ReadAll(), "");
}

// The reason the endpoint exists: it must start where a thread with a small fixed stack
// cannot, i.e. in a process whose static TLS is large (a CUDA build loads cuBLAS, ~111 KiB).
// Here the TLS is this test's own thread_local array, and the small-stack thread stands for
// civetweb's 100 KiB worker threads.
}  // namespace

// External linkage and a volatile access keep the compiler from dropping the array.
extern thread_local char large_static_tls[160 * 1024];
thread_local char large_static_tls[160 * 1024];

namespace {

void* TouchTls(void*) {
  volatile char* p = large_static_tls;
  p[0] = 1;
  return const_cast<char*>(p);
}

TEST(MetricsEndpoint, StartsInAProcessWhoseStaticTlsDoesNotFitA100KiBStack) {
  TouchTls(nullptr);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 100 * 1024);
  pthread_t small;
  const int rc = pthread_create(&small, &attr, TouchTls, nullptr);
  pthread_attr_destroy(&attr);
  if (rc == 0) pthread_join(small, nullptr);
  EXPECT_EQ(rc, EINVAL) << "a 100 KiB-stack thread should not fit 160 KiB of static TLS";

  auto endpoint = MetricsEndpoint::Start("127.0.0.1:0", [] { return std::string("up 1\n"); });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  auto got = testing::HttpGet((*endpoint)->port(), "/metrics", 30000);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->status, 200);
}

}  // namespace
}  // namespace fusetune
