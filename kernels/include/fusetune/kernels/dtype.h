// Host-side conversions between float and the storage types (round to nearest even): the 16-bit
// ones of Q, K, V and O, and FP8 e4m3 of a quantised KV cache (KvStorage::kE4m3), shared by the
// CPU backend, the reference and the tuner's input generation.
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_KERNELS_DTYPE_H_
#define FUSETUNE_KERNELS_DTYPE_H_

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "fusetune/kernels/problem.h"

namespace fusetune {

inline uint16_t FloatToBf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // keep NaN a NaN
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float Bf16BitsToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t FloatToHalfBits(float f);
float HalfBitsToFloat(uint16_t h);

// FP8 e4m3 (OCP): the value of byte `x` (exact in float; NaN for 0x7f and 0xff).
float E4m3ToFloat(uint8_t x);
// The byte nearest to f (ties to even), saturating: |f| beyond the largest finite value (448),
// infinities included, gives +-448, as serving engines quantise (cvt ... satfinite); NaN gives
// 0x7f (0xff when negative). Magnitudes below 2^-10 round to a signed zero.
uint8_t FloatToE4m3(float f);
inline constexpr float kE4m3Max = 448.0f;

// Quantises K or V ([rows][kv_heads][head_dim] floats) to e4m3 with one scale per KV head:
// scale[h] = (largest finite |x| of head h) / kE4m3Max (1 when the head is all zero or has no
// finite value), out = FloatToE4m3(x / scale[h]). `out` has values.size() bytes, `scales`
// kv_heads floats. What the tuner does to its unquantised inputs, and a serving engine to its
// cache, so a kernel is checked on what it will be given.
void QuantizeE4m3PerHead(std::span<const float> values, int kv_heads, int head_dim, std::span<uint8_t> out,
                         std::span<float> scales);

// Encodes `values` into `out` (sizeof = DTypeBytes(dtype) * values.size()).
void EncodeTensor(DType dtype, std::span<const float> values, void* out);
// Decodes `count` elements of storage type `dtype` at `data` into floats.
void DecodeTensor(DType dtype, const void* data, size_t count, float* out);
// Rounds each value to the storage type and back (what the kernel will actually see).
void RoundToDType(DType dtype, std::span<float> values);

}  // namespace fusetune

#endif  // FUSETUNE_KERNELS_DTYPE_H_
