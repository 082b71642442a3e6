#include "fusetune/kernels/dtype.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fusetune {

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Round to nearest even in
// integer arithmetic so the result does not depend on the FP rounding mode.
uint16_t FloatToHalfBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs_bits = u & 0x7fffffffu;
  if (abs_bits >= 0x7f800000u) {  // Inf or NaN
    if (abs_bits == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    // Quiet NaN; keep the top payload bits so a NaN stays recognisable.
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs_bits >> 13) & 0x03ffu));
  }
  if (abs_bits >= 0x477ff000u) {  // >= 65520: rounds past the largest half (65504)
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  const int exponent = static_cast<int>(abs_bits >> 23);  // biased float exponent
  if (exponent < 113) {  // below 2^-14: a half subnormal (or zero)
    if (exponent == 0) return static_cast<uint16_t>(sign);  // float subnormal: far below 2^-25
    const uint32_t mant = (abs_bits & 0x7fffffu) | 0x800000u;
    // value = mant * 2^(exponent - 150); in units of 2^-24: mant * 2^(exponent - 126).
    const int shift = 126 - exponent;  // >= 14
    if (shift > 24) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to zero
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;  // may carry into the smallest normal
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(exponent - 112) << 10) | ((abs_bits >> 13) & 0x3ffu);
  const uint32_t rem = abs_bits & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry may reach Inf: correct
  return static_cast<uint16_t>(sign | h);
}

float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exponent == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float.
    float f = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -f : f;
  } else if (exponent == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exponent + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float E4m3ToFloat(uint8_t x) {
  const bool negative = (x & 0x80u) != 0;
  const int exponent = (x >> 3) & 0xf;
  const int mant = x & 0x7;
  float f;
  if (exponent == 15 && mant == 7) {
    f = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    f = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant * 2^-9
  } else {
    f = std::ldexp(static_cast<float>(8 + mant), exponent - 10);  // (1 + mant/8) * 2^(e-7)
  }
  return negative ? -f : f;
}

// Integer rounding, as FloatToHalfBits, so the result does not depend on the rounding mode.
uint8_t FloatToE4m3(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs_bits = u & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  constexpr uint8_t kMaxFinite = 0x7e;                                      // 448
  if (abs_bits >= 0x43e00000u) return static_cast<uint8_t>(sign | kMaxFinite);  // >= 448, Inf
  const int exponent = static_cast<int>(abs_bits >> 23) - 127;
  if (static_cast<int>(abs_bits >> 23) == 0) return sign;  // float subnormal: far below 2^-10
  const uint64_t mant = (abs_bits & 0x7fffffu) | 0x800000u;  // value = mant * 2^(exponent - 23)
  if (exponent < -6) {
    // e4m3 subnormal: units of 2^-9, i.e. mant >> (14 - exponent).
    const int shift = 14 - exponent;  // >= 21
    if (shift >= 40) return sign;
    uint64_t q = mant >> shift;
    const uint64_t rem = mant & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;  // q == 8 is the smallest normal: its bits
    return static_cast<uint8_t>(sign | q);
  }
  uint32_t q = static_cast<uint32_t>((exponent + 7) << 3) | static_cast<uint32_t>((mant >> 20) & 0x7u);
  const uint64_t rem = mant & 0xfffffu;
  if (rem > 0x80000u || (rem == 0x80000u && (q & 1u))) ++q;  // a carry moves to the next binade
  if (q > kMaxFinite) q = kMaxFinite;  // 464 and up round past 448 (0x7f is NaN): saturate
  return static_cast<uint8_t>(sign | q);
}

void QuantizeE4m3PerHead(std::span<const float> values, int kv_heads, int head_dim, std::span<uint8_t> out,
                         std::span<float> scales) {
  const size_t row = static_cast<size_t>(kv_heads) * static_cast<size_t>(head_dim);
  if (row == 0 || out.size() < values.size() || scales.size() < static_cast<size_t>(kv_heads)) return;
  std::vector<float> amax(static_cast<size_t>(kv_heads), 0.0f);
  for (size_t i = 0; i < values.size(); ++i) {
    const float x = std::fabs(values[i]);
    float& m = amax[(i % row) / static_cast<size_t>(head_dim)];
    if (std::isfinite(x)) m = std::max(m, x);
  }
  for (int h = 0; h < kv_heads; ++h) {
    const float a = amax[static_cast<size_t>(h)];
    scales[static_cast<size_t>(h)] = a > 0.0f ? a / kE4m3Max : 1.0f;
  }
  for (size_t i = 0; i < values.size(); ++i) {
    out[i] = FloatToE4m3(values[i] / scales[(i % row) / static_cast<size_t>(head_dim)]);
  }
}

void EncodeTensor(DType dtype, std::span<const float> values, void* out) {
  switch (dtype) {
    case DType::kFp32:
      if (!values.empty()) std::memcpy(out, values.data(), values.size() * sizeof(float));
      return;
    case DType::kFp16: {
      auto* dst = static_cast<uint16_t*>(out);
      for (size_t i = 0; i < values.size(); ++i) dst[i] = FloatToHalfBits(values[i]);
      return;
    }
    case DType::kBf16: {
      auto* dst = static_cast<uint16_t*>(out);
      for (size_t i = 0; i < values.size(); ++i) dst[i] = FloatToBf16Bits(values[i]);
      return;
    }
  }
}

void DecodeTensor(DType dtype, const void* data, size_t count, float* out) {
  switch (dtype) {
    case DType::kFp32:
      if (count > 0) std::memcpy(out, data, count * sizeof(float));
      return;
    case DType::kFp16: {
      const auto* src = static_cast<const uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) out[i] = HalfBitsToFloat(src[i]);
      return;
    }
    case DType::kBf16: {
      const auto* src = static_cast<const uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) out[i] = Bf16BitsToFloat(src[i]);
      return;
    }
  }
}

void RoundToDType(DType dtype, std::span<float> values) {
  switch (dtype) {
    case DType::kFp32:
      return;
    case DType::kFp16:
      for (float& x : values) x = HalfBitsToFloat(FloatToHalfBits(x));
      return;
    case DType::kBf16:
      for (float& x : values) x = Bf16BitsToFloat(FloatToBf16Bits(x));
      return;
  }
}

}  // namespace fusetune
