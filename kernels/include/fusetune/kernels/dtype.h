// Host-side conversions between float and the 16-bit storage types (round to nearest even),
// shared by the CPU backend, the reference and the tuner's input generation.
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

// Encodes `values` into `out` (sizeof = DTypeBytes(dtype) * values.size()).
void EncodeTensor(DType dtype, std::span<const float> values, void* out);
// Decodes `count` elements of storage type `dtype` at `data` into floats.
void DecodeTensor(DType dtype, const void* data, size_t count, float* out);
// Rounds each value to the storage type and back (what the kernel will actually see).
void RoundToDType(DType dtype, std::span<float> values);

}  // namespace fusetune

#endif  // FUSETUNE_KERNELS_DTYPE_H_
