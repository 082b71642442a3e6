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

TEST(E4m3Conversion, EveryByteRoundTripsAndTheRangeIsOcpE4m3) {
  int nans = 0;
  for (int x = 0; x < 256; ++x) {
    const float f = E4m3ToFloat(static_cast<uint8_t>(x));
    if (std::isnan(f)) {
      ++nans;
      continue;
    }
    EXPECT_EQ(FloatToE4m3(f), x) << x << " " << f;
  }
  EXPECT_EQ(nans, 2);  // 0x7f and 0xff only: no infinities
  EXPECT_TRUE(std::isnan(E4m3ToFloat(0x7f)));
  EXPECT_EQ(E4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(E4m3ToFloat(0x01), std::ldexp(1.0f, -9));   // smallest subnormal
  EXPECT_EQ(E4m3ToFloat(0x08), std::ldexp(1.0f, -6));   // smallest normal
  EXPECT_EQ(E4m3ToFloat(0x38), 1.0f);
  EXPECT_EQ(E4m3ToFloat(0xb8), -1.0f);
}

TEST(E4m3Conversion, RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(FloatToE4m3(1.0625f), 0x38);   // halfway 1 and 1.125: even (1)
  EXPECT_EQ(FloatToE4m3(1.1875f), 0x3a);   // halfway 1.125 and 1.25: even (1.25)
  EXPECT_EQ(FloatToE4m3(1.07f), 0x39);
  EXPECT_EQ(FloatToE4m3(1.9375f), 0x40);   // carries into the next binade: 2
  EXPECT_EQ(FloatToE4m3(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal: even (0)
  EXPECT_EQ(FloatToE4m3(std::ldexp(1.5f, -10)), 0x01);
  EXPECT_EQ(FloatToE4m3(std::ldexp(7.5f, -9)), 0x08);  // rounds up into the smallest normal
  EXPECT_EQ(FloatToE4m3(-0.0f), 0x80);
  EXPECT_EQ(FloatToE4m3(1e-30f), 0x00);
  EXPECT_EQ(FloatToE4m3(460.0f), 0x7e);
  EXPECT_EQ(FloatToE4m3(1e6f), 0x7e);
  EXPECT_EQ(FloatToE4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(FloatToE4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
}

TEST(E4m3Conversion, PerHeadQuantisationUsesEachHeadsRangeAndStaysWithinHalfAStep) {
  // Two rows of two heads of 4: head 0 spans +-3, head 1 +-0.01 (a scale 300x smaller).
  const std::vector<float> values = {3.0f, -1.5f, 0.2f, 0.0f, 0.01f, -0.004f, 0.0003f, 0.0f,
                                     -2.9f, 1.0f, 0.7f, 0.1f, -0.01f, 0.009f, 0.001f, 0.002f};
  std::vector<uint8_t> bytes(values.size());
  std::vector<float> scales(2);
  QuantizeE4m3PerHead(values, 2, 4, bytes, scales);
  EXPECT_FLOAT_EQ(scales[0], 3.0f / 448.0f);
  EXPECT_FLOAT_EQ(scales[1], 0.01f / 448.0f);
  for (size_t i = 0; i < values.size(); ++i) {
    const float scale = scales[(i % 8) / 4];
    const double back = static_cast<double>(E4m3ToFloat(bytes[i])) * scale;
    // e4m3 keeps 4 significant bits: within 2^-4 relative, or one subnormal step absolute.
    EXPECT_NEAR(back, values[i], std::max(std::fabs(values[i]) / 16.0, std::ldexp(1.0, -9) * scale)) << i;
  }
  EXPECT_EQ(E4m3ToFloat(bytes[0]), 448.0f);  // each head's largest value maps to the format's
  std::vector<float> zeros(8, 0.0f);
  QuantizeE4m3PerHead(zeros, 2, 4, bytes, scales);
  EXPECT_EQ(scales[0], 1.0f);
}

}  // namespace
}  // namespace fusetune
