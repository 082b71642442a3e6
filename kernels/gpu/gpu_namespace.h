// Which GPU runtime a translation unit is built for, without including it: FUSETUNE_GPU_HIP or
// FUSETUNE_GPU_CUDA, FUSETUNE_GPU_NAMESPACE (`hip` or `cuda`: the namespace of the shared kernels
// and their host code, so one binary can hold both builds) and FUSETUNE_GPU_NAME for messages.
// HIP is chosen by hipcc (__HIPCC__) or, for host code compiled by the C++ compiler, by
// __HIP_PLATFORM_AMD__ (which hip_runtime.h requires anyway).
#ifndef FUSETUNE_KERNELS_GPU_GPU_NAMESPACE_H_
#define FUSETUNE_KERNELS_GPU_GPU_NAMESPACE_H_

#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__)
#define FUSETUNE_GPU_HIP 1
#define FUSETUNE_GPU_NAMESPACE hip
#define FUSETUNE_GPU_NAME "HIP"
#else
#define FUSETUNE_GPU_CUDA 1
#define FUSETUNE_GPU_NAMESPACE cuda
#define FUSETUNE_GPU_NAME "CUDA"
#endif

#endif  // FUSETUNE_KERNELS_GPU_GPU_NAMESPACE_H_
