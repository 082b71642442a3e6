// Tensor-core (mma.sync) instantiations: fp16 storage and operands, head_dim 128 (the table is
// MmaD128Table in fused_mma.cuh).
#include "fused_mma.cuh"

namespace fusetune::cuda::fused {

FusedInstanceList MmaFp16D128Instances() { return MmaD128Table<__half>(); }

}  // namespace fusetune::cuda::fused
