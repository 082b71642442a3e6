// One kernel source for CUDA (nvcc) and HIP (hipcc, ROCm 5.2+): the runtime header, the names of
// the runtime calls the shared kernels make, warp-level operations and the wavefront size.
//
// The shared kernels are written against the CUDA runtime's names (cudaError_t, cudaStream_t,
// cudaGetLastError, ...). Under CUDA this header only includes the CUDA headers, so the CUDA
// device code is exactly what it would be without it. Under HIP it maps each name the shared
// kernels use to its HIP counterpart; a name missing here is a compile error in the HIP build
// (CI compiles it), never a silent difference.
//
// Device code: a "warp" in the shared kernels is a group of 32 consecutive lanes (kWarpLanes).
// AMD wavefronts are 64 lanes on CDNA (gfx90a, gfx940) and 32 on RDNA (gfx1030); a 32-lane group
// is a whole wavefront or one half of it, and every warp-level operation here keeps that
// meaning on both: xor shuffles with offsets below 32 stay inside the group, SyncWarp orders the
// whole wavefront, AnyInWarp votes over the wavefront (a superset of the group: callers use it
// only where "true" is always a correct answer). kWavefrontSize is the hardware width, chosen per
// target with the __gfx*__ macros (as composable_kernel does) because ROCm does not promise a
// constexpr warpSize.
//
// Kernel symbols: FUSETUNE_GPU_NAMESPACE (gpu_namespace.h) is `cuda` or `hip`, so a binary can
// hold both builds of the shared kernels (fusetune::cuda::... and fusetune::hip::...).
//
// Thread-safety: declarations and stateless inline functions only.
#ifndef FUSETUNE_KERNELS_GPU_GPU_RUNTIME_H_
#define FUSETUNE_KERNELS_GPU_GPU_RUNTIME_H_

#include <cstdint>

#include "gpu_namespace.h"

#if defined(FUSETUNE_GPU_HIP)
#include <hip/hip_bfloat16.h>
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#if defined(FUSETUNE_GPU_HIP)
// The CUDA runtime names the shared kernels and their host launchers use.
using cudaError_t = hipError_t;
using cudaStream_t = hipStream_t;
inline constexpr hipError_t cudaSuccess = hipSuccess;
inline constexpr hipError_t cudaErrorInvalidValue = hipErrorInvalidValue;
inline constexpr hipError_t cudaErrorNotSupported = hipErrorNotSupported;
inline constexpr hipError_t cudaErrorMisalignedAddress = hipErrorInvalidValue;  // no HIP code
inline constexpr hipFuncAttribute cudaFuncAttributeMaxDynamicSharedMemorySize =
    hipFuncAttributeMaxDynamicSharedMemorySize;
inline hipError_t cudaGetLastError() { return hipGetLastError(); }
inline hipError_t cudaGetDevice(int* device) { return hipGetDevice(device); }
template <typename Kernel>
inline hipError_t cudaFuncSetAttribute(Kernel kernel, hipFuncAttribute attr, int value) {
  return hipFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}
#endif

namespace fusetune::gpu {

// Storage types: IEEE half and bfloat16 (HIP 5.2 has no bf16 pair type; Bf16x2 is two of them).
using Half = __half;
#if defined(FUSETUNE_GPU_HIP)
using Bf16 = hip_bfloat16;
struct alignas(4) Bf16x2 {
  Bf16 x, y;
};
#else
using Bf16 = __nv_bfloat16;
using Bf16x2 = __nv_bfloat162;
#endif

// Lanes of a warp as the shared kernels count them (threadIdx.x >> 5 is the warp).
inline constexpr int kWarpLanes = 32;

#if defined(__CUDACC__) || defined(__HIPCC__)

#if defined(FUSETUNE_GPU_HIP) && defined(__HIP_DEVICE_COMPILE__)
#if defined(__gfx1010__) || defined(__gfx1011__) || defined(__gfx1012__) || defined(__gfx1030__) || \
    defined(__gfx1031__) || defined(__gfx1032__) || defined(__gfx1034__) || defined(__gfx1035__) || \
    defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || defined(__GFX10__) ||   \
    defined(__GFX11__)
inline constexpr int kWavefrontSize = 32;  // RDNA (wave32, the compiler's default there)
#elif defined(__gfx900__) || defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) || \
    defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) || defined(__GFX9__)
inline constexpr int kWavefrontSize = 64;  // GCN / CDNA
#else
#error "unknown AMD GPU target: add its wavefront size to gpu_runtime.h"
#endif
#if defined(__AMDGCN_WAVEFRONT_SIZE)
static_assert(kWavefrontSize == __AMDGCN_WAVEFRONT_SIZE, "wavefront size of this target");
#endif
#elif defined(FUSETUNE_GPU_CUDA)
inline constexpr int kWavefrontSize = 32;
#endif
// (The HIP host pass has no wavefront size: the device's comes from hipDeviceProp_t::warpSize.)

// x from the lane `lane ^ offset` of the same 32-lane group (offset < 32).
template <typename T>
__device__ __forceinline__ T ShflXor(T x, int offset) {
#if defined(FUSETUNE_GPU_HIP)
  return __shfl_xor(x, offset);
#else
  return __shfl_xor_sync(0xffffffffu, x, offset);
#endif
}

// Orders the shared-memory accesses of the lanes of a warp (a whole wavefront on HIP).
__device__ __forceinline__ void SyncWarp() {
#if defined(FUSETUNE_GPU_HIP)
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#else
  __syncwarp();
#endif
}

// True when `pred` holds on any lane of the warp (HIP: of the wavefront, a superset).
__device__ __forceinline__ bool AnyInWarp(bool pred) {
#if defined(FUSETUNE_GPU_HIP)
  return __any(pred);
#else
  return __any_sync(0xffffffffu, pred);
#endif
}

// 2^x, approximate (CUDA: ex2.approx.ftz; HIP: the device library's exp2f).
__device__ __forceinline__ float FastExp2(float x) {
#if defined(FUSETUNE_GPU_HIP)
  return exp2f(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#endif
}

// A shared-memory address that 16-byte copies take (CUDA: the 32-bit shared window offset;
// HIP: the pointer itself). Byte offsets add to it on both.
#if defined(FUSETUNE_GPU_HIP)
using SharedAddress = unsigned char*;
__device__ __forceinline__ SharedAddress SmemAddress(const void* p) {
  return static_cast<unsigned char*>(const_cast<void*>(p));
}
#else
using SharedAddress = uint32_t;
__device__ __forceinline__ SharedAddress SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
#endif

// Copies 16 bytes global -> shared, or writes 16 zero bytes when !pred (the source is then not
// read; `src` must still be a valid address). CUDA: cp.async (sm_80+), complete after
// CpAsyncWait and a barrier. HIP has no asynchronous copy on these targets: the copy is done
// when the call returns, which satisfies every ordering the asynchronous one does.
__device__ __forceinline__ void CpAsync16(SharedAddress dst, const void* src, bool pred) {
#if defined(FUSETUNE_GPU_HIP)
  *reinterpret_cast<uint4*>(dst) = pred ? *static_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
#else
  const int src_bytes = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
#endif
}
// The unpredicated 16-byte copy.
__device__ __forceinline__ void CpAsync16(SharedAddress dst, const void* src) {
#if defined(FUSETUNE_GPU_HIP)
  *reinterpret_cast<uint4*>(dst) = *static_cast<const uint4*>(src);
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
#endif
}
__device__ __forceinline__ void CpAsyncCommit() {
#if defined(FUSETUNE_GPU_CUDA)
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
#if defined(FUSETUNE_GPU_CUDA)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// bfloat16 conversions the shared kernels use (HIP 5.2 has only hip_bfloat16's own).
__device__ __forceinline__ float Bf16ToFloat(Bf16 x) {
#if defined(FUSETUNE_GPU_HIP)
  return static_cast<float>(x);
#else
  return __bfloat162float(x);
#endif
}
__device__ __forceinline__ Bf16 FloatToBf16(float x) {
#if defined(FUSETUNE_GPU_HIP)
  return hip_bfloat16(x);  // round to nearest even
#else
  return __float2bfloat16_rn(x);
#endif
}
__device__ __forceinline__ float2 Bf16x2ToFloat2(Bf16x2 v) {
#if defined(FUSETUNE_GPU_HIP)
  return make_float2(static_cast<float>(v.x), static_cast<float>(v.y));
#else
  return __bfloat1622float2(v);
#endif
}
__device__ __forceinline__ Bf16x2 FloatsToBf16x2(float lo, float hi) {
#if defined(FUSETUNE_GPU_HIP)
  return Bf16x2{hip_bfloat16(lo), hip_bfloat16(hi)};
#else
  return __floats2bfloat162_rn(lo, hi);
#endif
}

#endif  // __CUDACC__ || __HIPCC__

}  // namespace fusetune::gpu

#endif  // FUSETUNE_KERNELS_GPU_GPU_RUNTIME_H_
