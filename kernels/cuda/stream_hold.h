// Holding a stream until its work is queued, so that a block of timed launches runs on the GPU
// back to back and the host's launch speed is not inside any sample.
//
// Why: a timed launch is measured between two events on the stream. When the host has not yet
// queued the next launch by the time the GPU finishes the previous one, the GPU idles and the
// gap can fall between a launch's events (the host's speed then shows in launch-bound kernels'
// times, and two processes of one build time a 10 µs kernel differently). A one-thread kernel
// queued first spins until the host, having queued everything, releases it through a word of
// host memory the kernel reads over PCIe.
//
// Thread-safety: a StreamHold belongs to one thread (the one that queues the held work).
#ifndef FUSETUNE_KERNELS_CUDA_STREAM_HOLD_H_
#define FUSETUNE_KERNELS_CUDA_STREAM_HOLD_H_

#include <cstdint>

#include <cuda_runtime.h>

namespace fusetune::cuda {

class StreamHold {
 public:
  StreamHold() = default;
  ~StreamHold();
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;

  // Queues the hold on `stream`: nothing queued after it on the stream starts until Release()
  // or until `timeout_ns` of GPU time passed (a host that never releases cannot hang the
  // device). Allocates its page of mapped host memory on first use. Returns the first CUDA
  // error (cudaSuccess when queued).
  cudaError_t Hold(cudaStream_t stream, uint64_t timeout_ns);

  // Lets the held stream run. No effect without a Hold.
  void Release();

  // After the held work finished (the stream was synchronized): whether the hold ended by its
  // timeout instead of Release(), in which case the host may have left gaps between launches.
  bool TimedOut() const;

 private:
  // Host-mapped words: [0] the release flag (host writes), [1] set by the kernel on timeout.
  volatile uint32_t* words_ = nullptr;
  uint32_t* device_words_ = nullptr;
};

}  // namespace fusetune::cuda

#endif  // FUSETUNE_KERNELS_CUDA_STREAM_HOLD_H_
