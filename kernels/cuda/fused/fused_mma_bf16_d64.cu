// Tensor-core (mma.sync) instantiations: bf16 storage and operands, head_dim 64 (the table is
// MmaD64Table in fused_mma.cuh).
#include "fused_mma.cuh"

namespace fusetune::cuda::fused {

FusedInstanceList MmaBf16D64Instances() { return MmaD64Table<__nv_bfloat16>(); }

}  // namespace fusetune::cuda::fused
