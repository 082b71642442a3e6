// The bisection search over scripted histories: monotonic, with skips, non-monotonic, capped.
#include "fusetune/regress/bisect.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace fusetune::regress {
namespace {

// A history of n commits: bad[i] says whether commit i measures bad against the good endpoint.
struct History {
  std::vector<bool> bad;
  std::vector<bool> broken;
  int probes = 0;
  absl::StatusOr<ProbeResult> Probe(int i) {
    ++probes;
    if (!broken.empty() && broken[i]) return ProbeResult::kSkip;
    return bad[i] ? ProbeResult::kBad : ProbeResult::kGood;
  }
};

History StepAt(int n, int step) {
  History h;
  for (int i = 0; i < n; ++i) h.bad.push_back(i >= step);
  return h;
}

TEST(BisectTest, FindsEveryStepOfAMonotonicRangeInLog2Probes) {
  for (int n : {1, 2, 3, 32, 33, 100}) {
    for (int step = 0; step < n; ++step) {
      History h = StepAt(n, step);
      absl::StatusOr<BisectOutcome> out = Bisect(n, [&](int i) { return h.Probe(i); }, 64);
      ASSERT_TRUE(out.ok());
      EXPECT_TRUE(out->found);
      EXPECT_EQ(out->first_bad, step) << "n " << n;
      EXPECT_LE(h.probes, static_cast<int>(std::ceil(std::log2(std::max(n, 2))))) << "n " << n << " step " << step;
    }
  }
}

TEST(BisectTest, ACommitThatDoesNotBuildIsSkippedAndANeighbourProbed) {
  History h = StepAt(33, 20);
  h.broken.assign(33, false);
  h.broken[15] = true;  // the first middle
  h.broken[21] = true;
  absl::StatusOr<BisectOutcome> out = Bisect(33, [&](int i) { return h.Probe(i); }, 64);
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(out->found);
  EXPECT_EQ(out->first_bad, 20);
  EXPECT_EQ(out->probes[0].index, 15);
  EXPECT_EQ(out->probes[0].result, ProbeResult::kSkip);
  // When the step's parent does not build, the culprit is it or the step: not found, both named.
  h = StepAt(33, 20);
  h.broken.assign(33, false);
  h.broken[19] = true;
  out = Bisect(33, [&](int i) { return h.Probe(i); }, 64);
  ASSERT_TRUE(out.ok());
  EXPECT_FALSE(out->found);
  EXPECT_EQ(out->candidates_from, 19);
  EXPECT_EQ(out->candidates_to, 20);
}

TEST(BisectTest, ANonMonotonicRangeEndsAtABadCommitWhoseParentIsGood) {
  // slow from 8, fast again from 16, slow again from 24.
  History h;
  for (int i = 0; i < 33; ++i) h.bad.push_back((i >= 8 && i < 16) || i >= 24);
  absl::StatusOr<BisectOutcome> out = Bisect(33, [&](int i) { return h.Probe(i); }, 64);
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(out->found);
  EXPECT_TRUE(out->first_bad == 8 || out->first_bad == 24) << out->first_bad;
  EXPECT_TRUE(h.bad[out->first_bad]);
  EXPECT_FALSE(out->first_bad > 0 && h.bad[out->first_bad - 1]);
}

TEST(BisectTest, TheCapStopsTheSearchWithTheRangeLeft) {
  History h = StepAt(100, 37);
  absl::StatusOr<BisectOutcome> out = Bisect(100, [&](int i) { return h.Probe(i); }, 3);
  ASSERT_TRUE(out.ok());
  EXPECT_FALSE(out->found);
  EXPECT_TRUE(out->capped);
  EXPECT_EQ(h.probes, 3);
  EXPECT_LE(out->candidates_from, 37);
  EXPECT_GE(out->candidates_to, 37);
}

TEST(BisectTest, AProbeErrorEndsTheSearch) {
  absl::StatusOr<BisectOutcome> out = Bisect(10, [](int) -> absl::StatusOr<ProbeResult> {
    return absl::UnavailableError("device lost");
  }, 10);
  EXPECT_TRUE(absl::IsUnavailable(out.status()));
  EXPECT_FALSE(Bisect(0, [](int) { return ProbeResult::kGood; }, 10).ok());
}

}  // namespace
}  // namespace fusetune::regress
