// Hopper wgmma + TMA instantiations (fused_wgmma.cuh): fp16 storage and operands, head_dim 64
// and 128. Compiled for every architecture; only the sm_90a code has a kernel body.
#include "fused_wgmma.cuh"

namespace fusetune::cuda::fused {

FusedInstanceList WgmmaFp16Instances() {
  using T = __half;
  static const FusedInstance kInstances[] = {
      // head_dim, block_m (64 rows per consumer warpgroup), block_s, stages
      WgmmaInstance<T, 64, 64, 128, 2>(),   WgmmaInstance<T, 64, 128, 128, 2>(),
      WgmmaInstance<T, 64, 192, 64, 2>(),   WgmmaInstance<T, 64, 128, 64, 3>(),
      WgmmaInstance<T, 64, 192, 64, 3>(),
      WgmmaInstance<T, 128, 64, 128, 2>(),  WgmmaInstance<T, 128, 128, 128, 2>(),
      WgmmaInstance<T, 128, 128, 128, 3>(), WgmmaInstance<T, 128, 128, 64, 3>(),
  };
  return {kInstances, static_cast<int>(sizeof(kInstances) / sizeof(kInstances[0]))};
}

}  // namespace fusetune::cuda::fused
