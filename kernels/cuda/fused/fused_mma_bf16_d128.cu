// Tensor-core (mma.sync) instantiations: bf16 storage and operands, head_dim 128.
#include "fused_mma.cuh"

namespace fusetune::cuda::fused {

FusedInstanceList MmaBf16D128Instances() {
  using T = __nv_bfloat16;
  static const FusedInstance kInstances[] = {
      // block_m, block_s, warps, stages
      MmaInstance<T, 128, 64, 32, 4, 1>(),   MmaInstance<T, 128, 64, 32, 4, 2>(),
      MmaInstance<T, 128, 64, 64, 4, 1>(),   MmaInstance<T, 128, 64, 64, 4, 2>(),
      MmaInstance<T, 128, 128, 32, 8, 1>(),  MmaInstance<T, 128, 128, 32, 8, 2>(),
      MmaInstance<T, 128, 128, 64, 8, 1>(),  MmaInstance<T, 128, 128, 64, 8, 2>(),
      MmaInstance<T, 128, 128, 128, 8, 1>(), MmaInstance<T, 128, 128, 128, 8, 2>(),
      // two m16 tiles per warp (Q re-read from shared memory): half the K/V reads per FLOP
      MmaInstance<T, 128, 128, 64, 4, 2>(),  MmaInstance<T, 128, 128, 32, 4, 2>(),
  };
  return {kInstances, static_cast<int>(sizeof(kInstances) / sizeof(kInstances[0]))};
}

}  // namespace fusetune::cuda::fused
