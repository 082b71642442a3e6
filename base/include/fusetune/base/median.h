// The median every component uses: of block medians, of regrets, of a cell's per-commit
// samples, of launch times.
//
// Thread-safety: a pure function.
#ifndef FUSETUNE_BASE_MEDIAN_H_
#define FUSETUNE_BASE_MEDIAN_H_

#include <vector>

namespace fusetune {

// The median of `values`: the middle element for an odd count, the mean of the two middle
// elements for an even count, NaN for none. NaNs in `values` make the result unspecified;
// callers check their samples are finite first.
double Median(std::vector<double> values);

}  // namespace fusetune

#endif  // FUSETUNE_BASE_MEDIAN_H_
