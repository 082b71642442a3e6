// What the fused CUDA kernel was compiled for: lets the backend's config space enumerate
// exactly the configs FusedCanImplement accepts (before the shared-memory check).
//
// Thread-safety: pure functions over immutable tables; safe to call concurrently.
#ifndef FUSETUNE_KERNELS_CUDA_FUSED_FUSED_CONFIGS_H_
#define FUSETUNE_KERNELS_CUDA_FUSED_FUSED_CONFIGS_H_

#include <cstdint>
#include <vector>

#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"
#include "../../gpu/gpu_namespace.h"  // FUSETUNE_GPU_NAMESPACE: cuda or hip

namespace fusetune::FUSETUNE_GPU_NAMESPACE {

// Every compiled fused config for (head_dim, storage dtype), all precisions, in a fixed
// order; empty for a head_dim without instantiations. Each config's `threads` is the block
// size, `split_kv` is 1.
std::vector<KernelConfig> FusedCompiledConfigs(int head_dim, DType dtype);

// Dynamic shared memory (bytes) the compiled instance of `config` needs for (head_dim,
// dtype), or -1 when there is no such instance.
int64_t FusedSharedMemoryBytes(int head_dim, DType dtype, const KernelConfig& config);

}  // namespace fusetune::FUSETUNE_GPU_NAMESPACE

#endif  // FUSETUNE_KERNELS_CUDA_FUSED_FUSED_CONFIGS_H_
