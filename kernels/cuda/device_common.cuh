// Small device helpers shared by the partial and materialized kernels.
#ifndef FUSETUNE_KERNELS_CUDA_DEVICE_COMMON_CUH_
#define FUSETUNE_KERNELS_CUDA_DEVICE_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace fusetune::cuda {

template <typename T>
__device__ __forceinline__ float ToFloat(T x);
template <>
__device__ __forceinline__ float ToFloat<float>(float x) { return x; }
template <>
__device__ __forceinline__ float ToFloat<__half>(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ float ToFloat<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// The exponent of a probability, (x - m) * c with c = scale * log2(e) (the softmax runs in the
// exp2 domain): scores x and the row max m stay in score units and only their difference is
// scaled, so the max gets exp2(0) = 1 exactly for any scale. Scaling first (x * c - m * c, or one
// fmaf) rounds the two products differently: at scale 1e10 that rounding alone is thousands in
// the exponent, so the max's p overflows or underflows and the row becomes NaN or wrong; and
// x * c alone can overflow where (x - m) * c does not. x = -inf (masked) gives -inf (p = 0);
// `m_shift` must not be -inf (callers use 0 for a row that has seen no key).
__device__ __forceinline__ float ScaledLog2Diff(float x, float m_shift, float c_log2) {
  return (x - m_shift) * c_log2;
}

// Merges two online-softmax states (max m in score units, sum l of exp2((x - m) * c)). An empty
// state has m = -inf and l = 0 and never produces NaN.
__device__ __forceinline__ void MergeMaxSum(float& m, float& l, float m2, float l2, float c_log2) {
  const float m_new = fmaxf(m, m2);
  if (m_new == -INFINITY) return;  // both empty
  l = (m == -INFINITY ? 0.0f : l * exp2f(ScaledLog2Diff(m, m_new, c_log2))) +
      (m2 == -INFINITY ? 0.0f : l2 * exp2f(ScaledLog2Diff(m2, m_new, c_log2)));
  m = m_new;
}

// Adds score x to one thread's online-softmax state. x = -inf (a -inf score: an infinite key
// component against the query, or a masked key) contributes nothing, so a row whose scores are
// all -inf keeps the empty state (m = -inf, l = 0: zeros) instead of NaN from -inf - -inf.
__device__ __forceinline__ void AddToMaxSum(float& m, float& l, float x, float c_log2) {
  if (x == -INFINITY) return;
  if (x > m) {
    l = l * exp2f(ScaledLog2Diff(m, x, c_log2)) + 1.0f;
    m = x;
  } else {
    l += exp2f(ScaledLog2Diff(x, m, c_log2));
  }
}

// The factors the write pass needs from a finished state: the shift (0 for an empty row, so
// -inf scores give p = 0, not NaN) and 1/l (0 for an empty row; NaN stays NaN, so a NaN score
// reaches the output instead of being written as zeros).
__device__ __forceinline__ float ShiftOfMax(float m) { return m == -INFINITY ? 0.0f : m; }
__device__ __forceinline__ float InverseOfSum(float l) { return l == 0.0f ? 0.0f : 1.0f / l; }

__device__ __forceinline__ void WarpReduceMaxSum(float& m, float& l, float c_log2) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
    const float l2 = __shfl_xor_sync(0xffffffffu, l, offset);
    MergeMaxSum(m, l, m2, l2, c_log2);
  }
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

}  // namespace fusetune::cuda

#endif  // FUSETUNE_KERNELS_CUDA_DEVICE_COMMON_CUH_
