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

// Merges two online-softmax states (max m, sum l of exp2(x - m)) in the log2 domain. An empty
// state has m = -inf and l = 0 and never produces NaN.
__device__ __forceinline__ void MergeMaxSum(float& m, float& l, float m2, float l2) {
  const float m_new = fmaxf(m, m2);
  if (m_new == -INFINITY) return;  // both empty
  l = (m == -INFINITY ? 0.0f : l * exp2f(m - m_new)) + (m2 == -INFINITY ? 0.0f : l2 * exp2f(m2 - m_new));
  m = m_new;
}

__device__ __forceinline__ void WarpReduceMaxSum(float& m, float& l) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
    const float l2 = __shfl_xor_sync(0xffffffffu, l, offset);
    MergeMaxSum(m, l, m2, l2);
  }
}

// Reduces (m, l) over the whole block; every thread gets the result. `sm`/`sl` hold 32 floats.
// The caller must __syncthreads() before reusing sm/sl.
__device__ __forceinline__ void BlockReduceMaxSum(float& m, float& l, float* sm, float* sl) {
  WarpReduceMaxSum(m, l);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int warps = (blockDim.x + 31) >> 5;
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
  __syncthreads();
  m = lane < warps ? sm[lane] : -INFINITY;
  l = lane < warps ? sl[lane] : 0.0f;
  WarpReduceMaxSum(m, l);
}

}  // namespace fusetune::cuda

#endif  // FUSETUNE_KERNELS_CUDA_DEVICE_COMMON_CUH_
