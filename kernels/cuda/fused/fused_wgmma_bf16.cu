// Hopper wgmma + TMA instantiations (fused_wgmma.cuh): bf16 storage and operands, head_dim 64
// and 128 (the table is WgmmaTable there). Compiled for every architecture; only the sm_90a
// code has a kernel body.
#include "fused_wgmma.cuh"

namespace fusetune::cuda::fused {

FusedInstanceList WgmmaBf16Instances() { return WgmmaTable<__nv_bfloat16>(); }

}  // namespace fusetune::cuda::fused
