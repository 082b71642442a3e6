// Exact-fp32 SIMT instantiations for fp16 and bf16 storage (converted to fp32 on load).
#include "fused_simt.cuh"

namespace fusetune::FUSETUNE_GPU_NAMESPACE::fused {

FusedInstanceList SimtHalfStorageInstances() {
  static const FusedInstance kInstances[] = {
      SimtInstance<__half, 64, 64, 64, 4, 1>(),          SimtInstance<__half, 64, 64, 64, 4, 2>(),
      SimtInstance<__half, 64, 64, 32, 4, 2>(),          SimtInstance<__half, 128, 64, 32, 4, 1>(),
      SimtInstance<__half, 128, 64, 32, 4, 2>(),
      SimtInstance<gpu::Bf16, 64, 64, 64, 4, 1>(),   SimtInstance<gpu::Bf16, 64, 64, 64, 4, 2>(),
      SimtInstance<gpu::Bf16, 64, 64, 32, 4, 2>(),   SimtInstance<gpu::Bf16, 128, 64, 32, 4, 1>(),
      SimtInstance<gpu::Bf16, 128, 64, 32, 4, 2>(),
  };
  return ListOf(kInstances);
}

}  // namespace fusetune::FUSETUNE_GPU_NAMESPACE::fused
