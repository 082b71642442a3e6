// Tensor-core (mma.sync) instantiations: fp16 storage and operands, head_dim 64 (the table is
// MmaD64Table in fused_mma.cuh).
#include "fused_mma.cuh"

namespace fusetune::cuda::fused {

FusedInstanceList MmaFp16D64Instances() { return MmaD64Table<__half>(); }

}  // namespace fusetune::cuda::fused
