#include "fusetune/base/strings.h"

#include <cstdio>
#include <iterator>

namespace fusetune {

std::string FormatBytes(int64_t bytes) {
  if (bytes < 1024) return Cat(bytes < 0 ? 0 : bytes, " B");
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit + 1 < static_cast<int>(std::size(kUnits))) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", value, kUnits[unit]);
  return text;
}

}  // namespace fusetune
