#include "fusetune/kernels/backend.h"

#include "gtest/gtest.h"

namespace fusetune {
namespace {

DeviceState State(int mhz, uint64_t reasons = 0, int power_mw = 300000) {
  DeviceState s;
  s.known = true;
  s.sm_clock_mhz = mhz;
  s.power_mw = power_mw;
  s.throttle_reasons = reasons;
  return s;
}

TEST(DeviceStateMoved, SteadyClockAndReasonsAreNotAMove) {
  EXPECT_FALSE(DeviceStateMoved(State(1980), State(1980)));
  // Power alone says nothing about the clock the kernel ran at.
  EXPECT_FALSE(DeviceStateMoved(State(1980, 0, 200000), State(1980, 0, 690000)));
  // A power-cap reason present on both sides is a steady (if capped) state.
  EXPECT_FALSE(DeviceStateMoved(State(1755, 0x4), State(1755, 0x4)));
}

TEST(DeviceStateMoved, ClockChangeOfMoreThanTwoPercentIsAMove) {
  EXPECT_FALSE(DeviceStateMoved(State(1000), State(1020)));  // exactly 2 %
  EXPECT_TRUE(DeviceStateMoved(State(1000), State(1021)));
  EXPECT_TRUE(DeviceStateMoved(State(1980), State(1650)));   // either direction
  EXPECT_FALSE(DeviceStateMoved(State(1650), State(1665)));
  EXPECT_TRUE(DeviceStateMoved(State(0), State(1980)));       // a clock appearing from 0
  EXPECT_FALSE(DeviceStateMoved(State(0), State(0)));
}

TEST(DeviceStateMoved, AChangedSetOfThrottleReasonsIsAMove) {
  EXPECT_TRUE(DeviceStateMoved(State(1980, 0), State(1980, 0x4)));    // power cap appeared
  EXPECT_TRUE(DeviceStateMoved(State(1980, 0x4), State(1980, 0)));    // and went away
  EXPECT_TRUE(DeviceStateMoved(State(1980, 0x4), State(1980, 0x20)));  // same count, other reason
}

TEST(DeviceStateMoved, UnknownOnEitherSideIsNeverAMove) {
  const DeviceState unknown;
  EXPECT_FALSE(DeviceStateMoved(unknown, unknown));
  EXPECT_FALSE(DeviceStateMoved(unknown, State(1980, 0x4)));
  EXPECT_FALSE(DeviceStateMoved(State(1000), unknown));
}

}  // namespace
}  // namespace fusetune
