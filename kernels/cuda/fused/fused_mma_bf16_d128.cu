// Tensor-core (mma.sync) instantiations: bf16 storage and operands, head_dim 128 (the table is
// MmaD128Table in fused_mma.cuh).
#include "fused_mma.cuh"

namespace fusetune::cuda::fused {

FusedInstanceList MmaBf16D128Instances() { return MmaD128Table<__nv_bfloat16>(); }

}  // namespace fusetune::cuda::fused
