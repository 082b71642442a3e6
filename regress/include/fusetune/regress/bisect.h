// Bisection over a commit range for the first commit whose measurement differs from the good
// endpoint (a slowdown, or with `improvement` a speed-up): the search of `fusetune bisect`.
//
// The range is commits[0..n) in first-parent order, all after the good endpoint; commits[n-1]
// is the bad endpoint, already known bad. A probe measures one commit against the good endpoint
// and says good, bad, or skip (it does not build, or the measurement cannot decide). The search
// keeps the last known good index `lo` (-1 is the good endpoint) and the first known bad `hi`,
// probes the middle of (lo, hi), and on a skip the untried index nearest the middle, as
// `git bisect` does. It ends when hi = lo + 1 (hi is the first bad commit: its parent is good),
// when every commit between them was skipped (then the culprit is one of them), or at the build
// cap.
//
// A range need not be monotonic (a commit can be slow and a later one fast again); the search
// then lands on some bad commit whose parent is good, which is why the caller confirms the
// culprit against its parent before reporting it.
//
// Thread-safety: a pure function of its probe.
#ifndef FUSETUNE_REGRESS_BISECT_H_
#define FUSETUNE_REGRESS_BISECT_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fusetune::regress {

enum class ProbeResult { kGood, kBad, kSkip };
const char* ProbeResultName(ProbeResult r);  // "good", "bad", "skip"

struct BisectProbe {
  int index = 0;
  ProbeResult result = ProbeResult::kSkip;
};

struct BisectOutcome {
  // The first bad commit's index, when found (its parent, index - 1 or the good endpoint, was
  // probed good or is the good endpoint).
  bool found = false;
  int first_bad = -1;
  // Otherwise the indexes the culprit lies among (every one of them skipped, or not probed
  // because the cap was reached): [lo + 1, hi].
  int candidates_from = 0;
  int candidates_to = 0;
  bool capped = false;           // stopped at max_probes
  std::vector<BisectProbe> probes;  // in probe order
};

// `probe(i)` measures commits[i]; an error status ends the search with that status.
// InvalidArgument for n < 1 or max_probes < 1.
absl::StatusOr<BisectOutcome> Bisect(int n, const std::function<absl::StatusOr<ProbeResult>(int)>& probe,
                                     int max_probes);

}  // namespace fusetune::regress

#endif  // FUSETUNE_REGRESS_BISECT_H_
