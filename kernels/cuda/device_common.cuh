// Small device helpers shared by the partial and materialized kernels.
#ifndef FUSETUNE_KERNELS_CUDA_DEVICE_COMMON_CUH_
#define FUSETUNE_KERNELS_CUDA_DEVICE_COMMON_CUH_

#include "../gpu/gpu_runtime.h"

namespace fusetune::FUSETUNE_GPU_NAMESPACE {

template <typename T>
__device__ __forceinline__ float ToFloat(T x);
template <>
__device__ __forceinline__ float ToFloat<float>(float x) { return x; }
template <>
__device__ __forceinline__ float ToFloat<__half>(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ float ToFloat<gpu::Bf16>(gpu::Bf16 x) {
  return gpu::Bf16ToFloat(x);
}

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ gpu::Bf16 FromFloat<gpu::Bf16>(float x) {
  return gpu::FloatToBf16(x);
}

// ---- the softmax's exponent (every CUDA variant) ---------------------------------------------
//
// Scores s and the row max m stay in score units; c = scale * log2(e); p = exp2(e(s)) with e(s)
// the exponent relative to the row's reference R(m):
//   * folded (|m * c| < kFoldedExponentLimit, the common case): R = r = m * c rounded once
//     (__fmul_rn: never contracted), e(s) = fmaf(s, c, -r), one FFMA per score. The rounding of r
//     shifts every exponent of the row by the same delta = m * c - r, |delta| <= 0.5 below the
//     limit, which the final 1/l cancels because every rescale uses the same r.
//   * exact (beyond the limit: scales like 1e10, or huge scores): R = m * c, e(s) = (s - m) * c.
//     Folding there would make delta thousands (ulp of 1e11): p overflows to inf or flushes to 0
//     and the row becomes NaN; and s * c alone could overflow where (s - m) * c does not.
// A masked score (-inf) gives e = -inf, p = 0.
inline constexpr float kFoldedExponentLimit = 16777216.0f;  // 2^24

struct ExpShift {
  float m;      // the shift in score units (never -inf for a row whose exponents are taken)
  float r;      // m * c rounded
  bool folded;  // |r| < kFoldedExponentLimit (false for m = +-inf or NaN)
};

__device__ __forceinline__ ExpShift MakeExpShift(float m, float c_log2) {
  ExpShift e;
  e.m = m;
  e.r = __fmul_rn(m, c_log2);
  e.folded = fabsf(e.r) < kFoldedExponentLimit;
  return e;
}

// The shift for a row max that may be -inf (a row that has seen no key): 0 instead, so masked
// scores still give exp2(-inf) = 0 and never -inf - -inf = NaN.
__device__ __forceinline__ ExpShift ExpShiftOfMax(float m, float c_log2) {
  return MakeExpShift(m == -INFINITY ? 0.0f : m, c_log2);
}

// e(s) for one score (branches on the row's mode; loops over many scores branch once outside).
__device__ __forceinline__ float ShiftedExponent(float s, const ExpShift& e, float c_log2) {
  return e.folded ? fmaf(s, c_log2, -e.r) : (s - e.m) * c_log2;
}

// The exponent of the factor that moves sums taken relative to R(from) to R(to):
// R(from) - R(to), exact in either mode (the FFMA's product is not rounded). A state with
// from.m = -inf (empty) gives -inf: factor 0.
__device__ __forceinline__ float RescaleExponent(const ExpShift& from, const ExpShift& to, float c_log2) {
  if (from.folded && to.folded) return from.r - to.r;
  if (from.folded) return fmaf(-to.m, c_log2, from.r);
  if (to.folded) return fmaf(from.m, c_log2, -to.r);
  return (from.m - to.m) * c_log2;
}

// Merges two online-softmax states (max m in score units, sum l of exp2(e(s)) relative to
// R(m)). An empty state has m = -inf and l = 0 and never produces NaN. (The partial variant
// keeps its own scaled-score state: partial_scores.cu.)
__device__ __forceinline__ void MergeMaxSum(float& m, float& l, float m2, float l2, float c_log2) {
  if (!(l == l) || !(l2 == l2)) {  // a NaN score: the row is NaN whatever else it sees
    l = NAN;
    return;
  }
  const float m_new = fmaxf(m, m2);
  if (m_new == -INFINITY) return;  // both empty
  const ExpShift to = MakeExpShift(m_new, c_log2);
  l = (m == -INFINITY ? 0.0f : l * exp2f(RescaleExponent(MakeExpShift(m, c_log2), to, c_log2))) +
      (m2 == -INFINITY ? 0.0f : l2 * exp2f(RescaleExponent(MakeExpShift(m2, c_log2), to, c_log2)));
  m = m_new;
}

// Adds score x to one thread's online-softmax state. x = -inf (an infinite key component
// against the query, or a masked key) contributes nothing, so a row whose scores are all -inf
// keeps the empty state (m = -inf, l = 0: zeros) instead of NaN from -inf - -inf.
__device__ __forceinline__ void AddToMaxSum(float& m, float& l, float x, float c_log2) {
  if (x == -INFINITY) return;
  if (x > m) {  // also m = -inf: the exponent is -inf, l * 0 = 0
    // x's own term relative to R(x) is exp2(e(x)), not 1: in folded mode e(x) is the rounding
    // of x * c, which the write pass sees too.
    const ExpShift to = MakeExpShift(x, c_log2);
    l = l * exp2f(RescaleExponent(MakeExpShift(m, c_log2), to, c_log2)) +
        exp2f(ShiftedExponent(x, to, c_log2));
    m = x;
  } else {  // NaN x lands here: l becomes NaN
    l += exp2f(ShiftedExponent(x, MakeExpShift(m, c_log2), c_log2));
  }
}

// 1/l for the write pass: 0 for an empty row (zeros); NaN stays NaN, so a NaN score reaches the
// output instead of being written as zeros.
__device__ __forceinline__ float InverseOfSum(float l) { return l == 0.0f ? 0.0f : 1.0f / l; }

__device__ __forceinline__ void WarpReduceMaxSum(float& m, float& l, float c_log2) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float m2 = gpu::ShflXor(m, offset);
    const float l2 = gpu::ShflXor(l, offset);
    MergeMaxSum(m, l, m2, l2, c_log2);
  }
}

__device__ __forceinline__ float WarpReduceMax(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, gpu::ShflXor(x, offset));
  return x;
}

__device__ __forceinline__ float WarpReduceSum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += gpu::ShflXor(x, offset);
  return x;
}

// Block-wide reductions; every thread gets the result. `scratch` holds 32 floats; the caller
// must __syncthreads() before reusing it.
__device__ __forceinline__ float BlockReduceMax(float x, float* scratch) {
  x = WarpReduceMax(x);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int warps = (blockDim.x + 31) >> 5;
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  return WarpReduceMax(lane < warps ? scratch[lane] : -INFINITY);
}

__device__ __forceinline__ float BlockReduceSum(float x, float* scratch) {
  x = WarpReduceSum(x);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int warps = (blockDim.x + 31) >> 5;
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  return WarpReduceSum(lane < warps ? scratch[lane] : 0.0f);
}

// Reduces (m, l) over the whole block; every thread gets the result. `sm`/`sl` hold 32 floats.
// The caller must __syncthreads() before reusing sm/sl.
__device__ __forceinline__ void BlockReduceMaxSum(float& m, float& l, float* sm, float* sl,
                                                  float c_log2) {
  WarpReduceMaxSum(m, l, c_log2);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int warps = (blockDim.x + 31) >> 5;
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
  __syncthreads();
  m = lane < warps ? sm[lane] : -INFINITY;
  l = lane < warps ? sl[lane] : 0.0f;
  WarpReduceMaxSum(m, l, c_log2);
}

}  // namespace fusetune::FUSETUNE_GPU_NAMESPACE

#endif  // FUSETUNE_KERNELS_CUDA_DEVICE_COMMON_CUH_
