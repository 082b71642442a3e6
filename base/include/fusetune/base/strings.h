// String helpers every component shares.
//
// Debian 12's abseil (20220623) is built with ABSL_OPTION_USE_STD_STRING_VIEW 0: its
// absl::string_view is a distinct type, so std::string_view arguments to StrCat, StrSplit
// and SimpleAtoi must be converted explicitly. Cat() is absl::StrCat accepting both.
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_BASE_STRINGS_H_
#define FUSETUNE_BASE_STRINGS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace fusetune {

inline absl::string_view ToAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }
template <typename T>
const T& ToAbsl(const T& x) {
  return x;
}

// absl::StrCat that also accepts std::string_view pieces.
template <typename... Args>
std::string Cat(const Args&... args) {
  return absl::StrCat(ToAbsl(args)...);
}

// A byte count for people: "512 B", "3.0 KiB", "1.5 GiB" (binary units, one decimal from KiB
// up). Negative counts print as 0 B.
std::string FormatBytes(int64_t bytes);

// Orders strings so that runs of digits compare as numbers ("q128" before "q1024"; leading
// zeros ignored) and everything else byte by byte: how problem keys are listed.
bool NaturalLess(std::string_view a, std::string_view b);

}  // namespace fusetune

#endif  // FUSETUNE_BASE_STRINGS_H_
