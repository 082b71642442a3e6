#include "fusetune/base/median.h"

#include <algorithm>
#include <cmath>

namespace fusetune {

double Median(std::vector<double> values) {
  if (values.empty()) return std::nan("");
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  // nth_element leaves the lower half before mid: its largest is the other middle element.
  const double lower = *std::max_element(values.begin(), values.begin() + mid);
  return 0.5 * (lower + upper);
}

}  // namespace fusetune
