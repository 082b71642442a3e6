#include "fusetune/kernels/dtype.h"

#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

namespace fusetune {
namespace {

TEST(HalfConversion, ExactValuesRoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, -65504.0f, 0.000061035156f /* 2^-14 */,
                  5.9604645e-08f /* 2^-24, smallest subnormal */, 1.0009765625f}) {
    EXPECT_EQ(HalfBitsToFloat(FloatToHalfBits(f)), f) << f;
  }
  EXPECT_EQ(FloatToHalfBits(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalfBits(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(FloatToHalfBits(-0.0f), 0x8000);
}

TEST(HalfConversion, RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to the even mantissa (1.0).
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9: rounds up to even.
  EXPECT_EQ(FloatToHalfBits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
}

TEST(HalfConversion, SubnormalsRoundCorrectly) {
  EXPECT_EQ(FloatToHalfBits(std::ldexp(3.0f, -24)), 0x0003);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: tie to even 2
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(FloatToHalfBits(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(FloatToHalfBits(std::numeric_limits<float>::denorm_min()), 0x0000);
  // The largest subnormal rounds up into the smallest normal.
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);
  for (uint16_t h = 1; h < 0x400; ++h) {  // every subnormal decodes and re-encodes exactly
    EXPECT_EQ(FloatToHalfBits(HalfBitsToFloat(h)), h);
  }
  EXPECT_EQ(HalfBitsToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfBitsToFloat(0x8200), -std::ldexp(1.0f, -15));
}

TEST(HalfConversion, OverflowInfinityAndNan) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToHalfBits(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToHalfBits(1e10f), 0x7c00);
  EXPECT_EQ(FloatToHalfBits(-1e10f), 0xfc00);
  EXPECT_EQ(FloatToHalfBits(inf), 0x7c00);
  EXPECT_EQ(HalfBitsToFloat(0xfc00), -inf);
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(FloatToHalfBits(std::nanf("")))));
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(0x7c01)));
}

TEST(HalfConversion, EveryFiniteHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    if ((bits & 0x7c00) == 0x7c00) continue;
    EXPECT_EQ(FloatToHalfBits(HalfBitsToFloat(bits)), bits) << std::hex << h;
  }
}

TEST(Bf16Conversion, RoundsToNearestEvenAndKeepsNan) {
  EXPECT_EQ(FloatToBf16Bits(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie -> even
  EXPECT_EQ(FloatToBf16Bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even (up)
  EXPECT_TRUE(std::isnan(Bf16BitsToFloat(FloatToBf16Bits(std::nanf("")))));
}

TEST(TensorConversion, EncodeDecodeAndRoundAgree) {
  std::vector<float> values = {0.1f, -3.14159f, 1e-6f, 70000.0f, 0.0f};
  for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    std::vector<uint8_t> storage(values.size() * DTypeBytes(dtype));
    EncodeTensor(dtype, values, storage.data());
    std::vector<float> decoded(values.size());
    DecodeTensor(dtype, storage.data(), values.size(), decoded.data());
    std::vector<float> rounded = values;
    RoundToDType(dtype, rounded);
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(decoded[i], rounded[i]) << DTypeName(dtype) << " " << i;
    }
  }
  std::vector<float> v = {0.1f};
  RoundToDType(DType::kFp16, v);
  EXPECT_NE(v[0], 0.1f);
  EXPECT_NEAR(v[0], 0.1f, 0.1f / 1024);
  std::vector<float> big = {70000.0f};
  RoundToDType(DType::kFp16, big);
  EXPECT_TRUE(std::isinf(big[0]));
}

}  // namespace
}  // namespace fusetune
