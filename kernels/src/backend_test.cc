#include "fusetune/kernels/backend.h"

#include <limits>
#include <string>

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

TEST(ValidateBuffers, E4m3ProblemsNeedBothScalesAndOthersNone) {
  AttentionProblem p;
  p.q_len = p.kv_len = 4;
  p.head_dim = 64;
  p.dtype = DType::kBf16;
  alignas(16) static float storage[64];
  AttentionBuffers b{storage, storage, storage, storage, nullptr};
  EXPECT_TRUE(ValidateBuffers(p, b).ok());
  b.k_scale = storage;
  EXPECT_NE(ValidateBuffers(p, b).message().find("not quantised"), std::string::npos);
  p.kv_storage = KvStorage::kE4m3;
  EXPECT_NE(ValidateBuffers(p, b).message().find("v_scale"), std::string::npos);
  b.v_scale = storage + 1;
  EXPECT_TRUE(ValidateBuffers(p, b).ok());
}

TEST(ValidateKvScales, RefusesNonFiniteNegativeAndOverflowingScales) {
  AttentionProblem p;
  p.kv_heads = p.q_heads = 2;
  p.q_len = p.kv_len = 4;
  p.head_dim = 64;
  p.dtype = DType::kFp16;
  p.kv_storage = KvStorage::kE4m3;
  float k[2] = {0.5f, 0.0f}, v[2] = {1.0f, 3.0f};
  EXPECT_TRUE(ValidateKvScales(p, k, v).ok());
  v[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(ValidateKvScales(p, k, v).message().find("v_scale[1]"), std::string::npos);
  v[1] = 1.0f;
  k[0] = -1.0f;
  EXPECT_NE(ValidateKvScales(p, k, v).message().find("k_scale[0]"), std::string::npos);
  k[0] = 1e38f;
  p.softmax_scale = 100.0f;
  EXPECT_NE(ValidateKvScales(p, k, v).message().find("exceeds"), std::string::npos);
}

}  // namespace
}  // namespace fusetune
