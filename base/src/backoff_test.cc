#include "fusetune/base/backoff.h"

#include <gtest/gtest.h>

namespace fusetune {
namespace {

TEST(Backoff, GrowsExponentiallyUpToTheCap) {
  Backoff b({.initial_ms = 100, .max_ms = 1000, .multiplier = 2.0, .jitter = 0.0}, 1);
  EXPECT_EQ(b.NextDelayMs(), 100);
  EXPECT_EQ(b.NextDelayMs(), 200);
  EXPECT_EQ(b.NextDelayMs(), 400);
  EXPECT_EQ(b.NextDelayMs(), 800);
  EXPECT_EQ(b.NextDelayMs(), 1000);
  for (int i = 0; i < 5000; ++i) EXPECT_LE(b.NextDelayMs(), 1000);
}

TEST(Backoff, JitterStaysWithinItsFractionAndVaries) {
  Backoff b({.initial_ms = 1000, .max_ms = 1000, .multiplier = 2.0, .jitter = 0.5}, 7);
  int64_t lo = 1 << 30, hi = 0;
  for (int i = 0; i < 200; ++i) {
    int64_t d = b.NextDelayMs();
    lo = std::min(lo, d);
    hi = std::max(hi, d);
    EXPECT_GE(d, 500);
    EXPECT_LE(d, 1000);
  }
  EXPECT_LT(lo, hi);  // not lock-step
}

TEST(Backoff, ResetReturnsToTheInitialDelay) {
  Backoff b({.initial_ms = 10, .max_ms = 10000, .multiplier = 3.0, .jitter = 0.0}, 1);
  b.NextDelayMs();
  b.NextDelayMs();
  EXPECT_EQ(b.NextDelayMs(), 90);
  b.Reset();
  EXPECT_EQ(b.NextDelayMs(), 10);
}

}  // namespace
}  // namespace fusetune
