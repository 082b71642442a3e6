#include "fusetune/base/time.h"

#include <chrono>
#include <ctime>

namespace fusetune {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string FormatUtc(int64_t unix_ms, const char* strftime_format) {
  // Floor division, so that times before 1970 fall in the right second.
  const int64_t seconds = unix_ms >= 0 ? unix_ms / 1000 : -((-unix_ms + 999) / 1000);
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  if (gmtime_r(&t, &tm) == nullptr) return "";
  char text[128];
  const size_t n = std::strftime(text, sizeof text, strftime_format, &tm);
  return std::string(text, n);
}

std::string Rfc3339Utc(int64_t unix_ms) { return FormatUtc(unix_ms, "%Y-%m-%dT%H:%M:%SZ"); }

}  // namespace fusetune
