// Exact-fp32 SIMT instantiations for fp32 storage (the seed article's shapes).
#include "fused_simt.cuh"

namespace fusetune::cuda::fused {

FusedInstanceList SimtFp32StorageInstances() {
  static const FusedInstance kInstances[] = {
      // head_dim 64: block_m, block_s, warps, stages
      SimtInstance<float, 64, 64, 64, 4, 1>(),   SimtInstance<float, 64, 64, 64, 4, 2>(),
      SimtInstance<float, 64, 64, 32, 4, 1>(),   SimtInstance<float, 64, 64, 32, 4, 2>(),
      SimtInstance<float, 64, 64, 64, 2, 1>(),   SimtInstance<float, 64, 64, 64, 2, 2>(),
      SimtInstance<float, 64, 128, 64, 4, 1>(),  SimtInstance<float, 64, 64, 64, 8, 2>(),
      SimtInstance<float, 64, 128, 64, 8, 1>(),  SimtInstance<float, 64, 128, 64, 8, 2>(),
      SimtInstance<float, 64, 128, 32, 8, 1>(),  SimtInstance<float, 64, 128, 32, 8, 2>(),
      // head_dim 128
      SimtInstance<float, 128, 64, 32, 4, 1>(),  SimtInstance<float, 128, 64, 32, 4, 2>(),
      SimtInstance<float, 128, 64, 64, 4, 1>(),  SimtInstance<float, 128, 64, 64, 4, 2>(),
      SimtInstance<float, 128, 64, 32, 8, 1>(),  SimtInstance<float, 128, 64, 32, 8, 2>(),
      SimtInstance<float, 128, 32, 32, 4, 1>(),  SimtInstance<float, 128, 32, 32, 4, 2>(),
  };
  return {kInstances, static_cast<int>(sizeof(kInstances) / sizeof(kInstances[0]))};
}

}  // namespace fusetune::cuda::fused
