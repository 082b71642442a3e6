// Debian 12's abseil is built with its own absl::string_view (not std::string_view), so
// std::string_view pieces must be converted before StrCat/StrSplit. Internal to service/.
#ifndef FUSETUNE_SERVICE_SERVER_STRING_UTIL_H_
#define FUSETUNE_SERVICE_SERVER_STRING_UTIL_H_

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace fusetune::service_internal {

inline absl::string_view ToAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }
template <typename T>
const T& ToAbsl(const T& x) {
  return x;
}
inline std::string_view ToStd(absl::string_view s) { return std::string_view(s.data(), s.size()); }

// absl::StrCat that also accepts std::string_view pieces.
template <typename... Args>
std::string Cat(const Args&... args) {
  return absl::StrCat(ToAbsl(args)...);
}

}  // namespace fusetune::service_internal

#endif  // FUSETUNE_SERVICE_SERVER_STRING_UTIL_H_
