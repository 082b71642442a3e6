// Evicting the L2 cache between timed launches, so each is measured from cold caches.
//
// The flush reads a buffer larger than L2 instead of writing it: a write leaves L2 full of
// dirty lines (the last ~50 MB of the buffer on an H200), and the timed kernel then pays for
// writing them back to memory while it reads its own inputs. Measured on an H200 (decode,
// b16 32/8 heads d128 bf16, cache 1k): 30.2 µs after a 256 MiB memset, 22.5 µs after reading
// 256 MiB; docs/perf.md has the table.
//
// Thread-safety: enqueues work on `stream`; safe to call from any thread that owns the stream.
#ifndef FUSETUNE_KERNELS_CUDA_L2_FLUSH_H_
#define FUSETUNE_KERNELS_CUDA_L2_FLUSH_H_

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace fusetune::cuda {

// Enqueues a read of `bytes` bytes of `buffer` (16-byte aligned, bytes a multiple of 16) on
// `stream` by 4 blocks per multiprocessor (`multiprocessors`: the device's count, which the
// caller has already read); writes nothing but one word of `sink` (4 bytes of device memory),
// and only for a value the data never produces, so the reads are not optimised away. Returns
// the launch's error (cudaSuccess when queued).
cudaError_t EnqueueL2FlushByReading(const void* buffer, size_t bytes, uint32_t* sink, int multiprocessors,
                                    cudaStream_t stream);

}  // namespace fusetune::cuda

#endif  // FUSETUNE_KERNELS_CUDA_L2_FLUSH_H_
