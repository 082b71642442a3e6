// Tensor-core (mma.sync m16n8k8 tf32) instantiations: fp32 storage, tf32 operands.
#include "fused_mma.cuh"

namespace fusetune::cuda::fused {

FusedInstanceList MmaTf32Instances() {
  static const FusedInstance kInstances[] = {
      // head_dim, block_m, block_s, warps, stages
      MmaInstance<float, 64, 64, 32, 4, 1>(),   MmaInstance<float, 64, 64, 32, 4, 2>(),
      MmaInstance<float, 64, 64, 64, 4, 1>(),   MmaInstance<float, 64, 64, 64, 4, 2>(),
      MmaInstance<float, 64, 128, 64, 8, 1>(),  MmaInstance<float, 64, 128, 64, 8, 2>(),
      MmaInstance<float, 128, 64, 32, 4, 1>(),  MmaInstance<float, 128, 64, 32, 4, 2>(),
      MmaInstance<float, 128, 64, 64, 4, 1>(),  MmaInstance<float, 128, 64, 64, 4, 2>(),
      MmaInstance<float, 128, 128, 64, 8, 1>(), MmaInstance<float, 128, 128, 64, 8, 2>(),
  };
  return ListOf(kInstances);
}

}  // namespace fusetune::cuda::fused
