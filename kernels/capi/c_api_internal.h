// What the C ABI's source files share: the status conversion at the boundary.
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_KERNELS_CAPI_C_API_INTERNAL_H_
#define FUSETUNE_KERNELS_CAPI_C_API_INTERNAL_H_

#include <cstddef>
#include <exception>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace fusetune::capi {

// Writes `message` NUL-terminated into err[0..errlen), truncated to fit; nothing when err is
// NULL or errlen 0.
void WriteMessage(std::string_view message, char* err, size_t errlen);

// The fusetune_status code of `s`, with its message written as WriteMessage does (empty on OK).
int Report(const absl::Status& s, char* err, size_t errlen);

// Runs `body` (returning absl::Status) and reports its status; any escaping C++ exception
// becomes INTERNAL, so none crosses the C boundary.
template <typename F>
int Guard(char* err, size_t errlen, F&& body) {
  try {
    return Report(body(), err, errlen);
  } catch (const std::exception& e) {
    return Report(absl::InternalError(std::string("unexpected exception: ") + e.what()), err, errlen);
  } catch (...) {
    return Report(absl::InternalError("unexpected exception"), err, errlen);
  }
}

}  // namespace fusetune::capi

#endif  // FUSETUNE_KERNELS_CAPI_C_API_INTERNAL_H_
