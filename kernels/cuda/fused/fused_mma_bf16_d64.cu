// Tensor-core (mma.sync) instantiations: bf16 storage and operands, head_dim 64.
#include "fused_mma.cuh"

namespace fusetune::cuda::fused {

FusedInstanceList MmaBf16D64Instances() {
  using T = __nv_bfloat16;
  static const FusedInstance kInstances[] = {
      // block_m, block_s, warps, stages
      MmaInstance<T, 64, 64, 64, 4, 1>(),   MmaInstance<T, 64, 64, 64, 4, 2>(),
      MmaInstance<T, 64, 64, 128, 4, 1>(),  MmaInstance<T, 64, 64, 128, 4, 2>(),
      MmaInstance<T, 64, 128, 64, 8, 1>(),  MmaInstance<T, 64, 128, 64, 8, 2>(),
      MmaInstance<T, 64, 128, 128, 8, 1>(), MmaInstance<T, 64, 128, 128, 8, 2>(),
      MmaInstance<T, 64, 128, 64, 4, 1>(),  MmaInstance<T, 64, 128, 64, 4, 2>(),
      // two m16 tiles per warp: half the K/V shared-memory reads per FLOP
      MmaInstance<T, 64, 64, 64, 2, 1>(),   MmaInstance<T, 64, 64, 64, 2, 2>(),
  };
  return {kInstances, static_cast<int>(sizeof(kInstances) / sizeof(kInstances[0]))};
}

}  // namespace fusetune::cuda::fused
