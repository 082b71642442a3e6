// A planted slowdown: a Backend decorator that reports chosen cells slower by a set fraction,
// for measuring what the regression method detects on a device's real noise (the samples are
// the device's own, multiplied by 1 + fraction, so the effect is exact and the noise is real).
// Used by `fusetune bench-serve --plant-slowdown` and by the method's tests; never by a tune.
//
// Thread-safety: as the wrapped backend.
#ifndef FUSETUNE_BENCH_PLANTED_SLOWDOWN_H_
#define FUSETUNE_BENCH_PLANTED_SLOWDOWN_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"

namespace fusetune::bench {

struct PlantedSlowdown {
  // Cells whose "<problem key> <config key>" contains this text (empty: every cell).
  std::string cell_substring;
  double fraction = 0;  // 0.03 = 3 % slower; in (-0.5, 10]
};

// Parses "SUBSTRING=FRACTION" (e.g. "q4096/k4096/d128/causal1/bf16 fused=0.03"); the fraction
// may end in '%' ("3%"). InvalidArgument for a missing '=', a bad number or one out of range.
absl::StatusOr<PlantedSlowdown> ParsePlantedSlowdown(std::string_view spec);

// Forwards everything to `inner`, except that Time() multiplies the samples of matching cells
// by 1 + fraction (the first matching slowdown wins).
class PlantedSlowdownBackend : public Backend {
 public:
  PlantedSlowdownBackend(std::unique_ptr<Backend> inner, std::vector<PlantedSlowdown> slowdowns);
  // ... every Backend method, forwarded
};

}  // namespace fusetune::bench

#endif  // FUSETUNE_BENCH_PLANTED_SLOWDOWN_H_
