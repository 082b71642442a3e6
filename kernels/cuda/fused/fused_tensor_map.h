// Host-side TMA descriptors (CUtensorMap) for the Hopper fused kernel. The encoder comes from
// the driver through the runtime's entry-point query, so nothing links libcuda and the
// binaries still start on machines without a driver.
//
// Thread-safety: EncodeRowTileMap may be called concurrently (the driver entry point is
// looked up once, under a function-local static).
#ifndef FUSETUNE_KERNELS_CUDA_FUSED_FUSED_TENSOR_MAP_H_
#define FUSETUNE_KERNELS_CUDA_FUSED_FUSED_TENSOR_MAP_H_

#include <cstdint>

#include <cuda.h>
#include <cuda_runtime.h>

#include "fused/fused_instance.h"

namespace fusetune::cuda::fused {

// Describes a [rows][heads][head_dim] tensor of 16-bit `storage` at `base` (strides in
// elements) for TMA loads of boxes of `box_rows` rows x 1 head x 64 columns with the 128-byte
// swizzle (the wgmma K-major / MN-major SW128 layout). Rows past `rows` read as zeros.
// Returns cudaSuccess, cudaErrorNotSupported when the driver has no TMA encoder or the
// storage is not 16-bit, or cudaErrorInvalidValue when the driver rejects the geometry
// (unaligned base or strides, box too large).
cudaError_t EncodeRowTileMap(CUtensorMap* map, const void* base, StorageCode storage,
                             int head_dim, int heads, int64_t rows, int64_t row_stride,
                             int64_t head_stride, int box_rows);

}  // namespace fusetune::cuda::fused

#endif  // FUSETUNE_KERNELS_CUDA_FUSED_FUSED_TENSOR_MAP_H_
