#include "fusetune/kernels/backend.h"

#include "absl/strings/str_cat.h"

namespace fusetune {
namespace {

// Device class parts are '/'-separated: keep each part free of '/' and whitespace.
std::string Sanitize(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == ' ' || c == '\t' || c == '/' || c == '\n') {
      if (!out.empty() && out.back() != '-') out.push_back('-');
    } else {
      out.push_back(c);
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "unknown" : out;
}

}  // namespace

std::string DeviceInfo::DeviceClass() const {
  return absl::StrCat(Sanitize(backend), "/", Sanitize(name), "/", Sanitize(arch));
}

}  // namespace fusetune
