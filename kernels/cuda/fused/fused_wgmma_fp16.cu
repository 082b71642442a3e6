// Hopper wgmma + TMA instantiations (fused_wgmma.cuh): fp16 storage and operands, head_dim 64
// and 128 (the table is WgmmaTable there). Compiled for every architecture; only the sm_90a
// code has a kernel body.
#include "fused_wgmma.cuh"

namespace fusetune::cuda::fused {

FusedInstanceList WgmmaFp16Instances() { return WgmmaTable<__half>(); }

}  // namespace fusetune::cuda::fused
