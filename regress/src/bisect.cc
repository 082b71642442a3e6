#include "fusetune/regress/bisect.h"

#include <cstdlib>
#include <set>

namespace fusetune::regress {

const char* ProbeResultName(ProbeResult r) {
  switch (r) {
    case ProbeResult::kGood:
      return "good";
    case ProbeResult::kBad:
      return "bad";
    case ProbeResult::kSkip:
      return "skip";
  }
  return "skip";
}

namespace {

// The untried index in (lo, hi) nearest their middle (the lower one on a tie); -1 if none.
int NextProbe(int lo, int hi, const std::set<int>& skipped) {
  const int middle = lo + (hi - lo) / 2;
  for (int distance = 0; distance < hi - lo; ++distance) {
    for (int candidate : {middle - distance, middle + distance}) {
      if (candidate > lo && candidate < hi && skipped.count(candidate) == 0) return candidate;
    }
  }
  return -1;
}

}  // namespace

absl::StatusOr<BisectOutcome> Bisect(int n, const std::function<absl::StatusOr<ProbeResult>(int)>& probe,
                                     int max_probes) {
  if (n < 1) return absl::InvalidArgumentError("the range holds no commit");
  if (max_probes < 1) return absl::InvalidArgumentError("the probe cap must be at least 1");
  BisectOutcome out;
  int lo = -1;
  int hi = n - 1;
  std::set<int> skipped;
  for (;;) {
    const int next = NextProbe(lo, hi, skipped);
    if (next < 0) break;
    if (static_cast<int>(out.probes.size()) >= max_probes) {
      out.capped = true;
      break;
    }
    absl::StatusOr<ProbeResult> result = probe(next);
    if (!result.ok()) return result.status();
    out.probes.push_back({next, *result});
    if (*result == ProbeResult::kGood) {
      lo = next;
    } else if (*result == ProbeResult::kBad) {
      hi = next;
    } else {
      skipped.insert(next);
    }
  }
  out.found = hi == lo + 1;
  out.first_bad = out.found ? hi : -1;
  out.candidates_from = lo + 1;
  out.candidates_to = hi;
  return out;
}

}  // namespace fusetune::regress
