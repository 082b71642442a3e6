// Shared-memory mbarriers and the proxy fences around them (sm_90: the Hopper prefill kernel's
// TMA pipeline). Device-only inline helpers; a kernel compiled for an older architecture must
// not call them.
#ifndef FUSETUNE_KERNELS_CUDA_MBARRIER_CUH_
#define FUSETUNE_KERNELS_CUDA_MBARRIER_CUH_

#include <cstdint>

namespace fusetune::cuda {

__device__ __forceinline__ void MbarInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Arrives once and adds `bytes` to the transactions the current phase waits for.
__device__ __forceinline__ void MbarExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void MbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Blocks until the phase of parity `parity` has completed.
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT_LOOP:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_LOOP;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Makes the initialised barriers visible to the asynchronous proxy (TMA).
__device__ __forceinline__ void FenceMbarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Orders this thread's generic-proxy shared-memory writes before later async-proxy accesses
// (wgmma operands, TMA writes to the same bytes).
__device__ __forceinline__ void FenceProxyAsyncShared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

}  // namespace fusetune::cuda

#endif  // FUSETUNE_KERNELS_CUDA_MBARRIER_CUH_
