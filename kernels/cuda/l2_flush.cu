#include "l2_flush.h"

namespace fusetune::cuda {
namespace {

__global__ void ReadToEvictL2(const uint4* p, int64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 x = p[i];
    acc ^= x.x ^ x.y ^ x.z ^ x.w;
  }
  // The buffer is zeroed when allocated: acc is 0, the store never happens.
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

}  // namespace

cudaError_t EnqueueL2FlushByReading(const void* buffer, size_t bytes, uint32_t* sink, int multiprocessors,
                                    cudaStream_t stream) {
  if (multiprocessors < 1) return cudaErrorInvalidValue;
  ReadToEvictL2<<<4 * multiprocessors, 1024, 0, stream>>>(static_cast<const uint4*>(buffer), static_cast<int64_t>(bytes / 16),
                                                sink);
  return cudaGetLastError();
}

}  // namespace fusetune::cuda
